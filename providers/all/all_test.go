package all_test

import (
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/crabbox-dev/crabbox/provider"
	_ "github.com/crabbox-dev/crabbox/providers/all"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// Settings marked Locates are recorded in every lease's claim, so none may
// be a secret.
func TestLocatorsAreNoSecrets(t *testing.T) {
	for _, p := range provider.Default().All() {
		for _, o := range p.Spec().Options {
			name := strings.ToLower(o.Name + " " + o.Flag)
			for _, word := range []string{"token", "secret", "password", "credential"} {
				if o.Locates && strings.Contains(name, word) {
					t.Errorf("provider %s: option %q locates leases but looks like a secret (%s)", p.Spec().Name, o.Name, word)
				}
			}
		}
	}
}
