package testenv

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestReport(t *testing.T) {
	g := &Group{Name: "docker engine", Enable: "bash .ci/setup.d/10-docker.sh"}
	var out strings.Builder
	g.Report(&out)
	if out.Len() != 0 {
		t.Errorf("Report with no skips wrote %q", out.String())
	}
	t.Setenv("CI", "")
	for _, why := range []string{"no busybox", "something else"} {
		t.Run(why, func(t *testing.T) { g.Skip(t, why) })
	}
	g.Report(&out)
	want := "crabbox: 2 docker engine tests skipped: no busybox; to run them: bash .ci/setup.d/10-docker.sh\n"
	if diff := cmp.Diff(want, out.String()); diff != "" {
		t.Errorf("Report (-want +got):\n%s", diff)
	}
}

func TestMain(m *testing.M) { Main(m, nil) }
