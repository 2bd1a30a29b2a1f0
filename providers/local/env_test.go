package local

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestBoxEnvKeepsOnlyLoginBasics(t *testing.T) {
	got := boxEnv([]string{
		"PATH=/usr/bin:/bin", "HOME=/home/me", "CRABBOX_COORDINATOR_TOKEN=secret",
		"AWS_SECRET_ACCESS_KEY=secret", "LANG=C.UTF-8", "USER=me", "garbage",
	})
	want := []string{"PATH=/usr/bin:/bin", "HOME=/home/me", "LANG=C.UTF-8", "USER=me"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("boxEnv (-want +got):\n%s", diff)
	}
}
