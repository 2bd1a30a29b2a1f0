package providertest

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/crabbox-dev/crabbox/provider"
)

// CheckDoctor fails tb unless checks (a backend's Doctor result) are the
// checks named in want, each passing or failing as want says, and each
// check named in details has a detail containing the given text (the
// setting to fix, say).
func CheckDoctor(tb testing.TB, checks []provider.Check, want map[string]bool, details map[string]string) {
	tb.Helper()
	got := map[string]bool{}
	detail := map[string]string{}
	for _, c := range checks {
		got[c.Name], detail[c.Name] = c.OK, c.Detail
	}
	if diff := cmp.Diff(want, got); diff != "" {
		tb.Errorf("Doctor (-want +got):\n%s\n%+v", diff, checks)
	}
	for name, text := range details {
		if !strings.Contains(detail[name], text) {
			tb.Errorf("check %q: detail %q, want it to contain %q", name, detail[name], text)
		}
	}
}
