//go:build unix

package opensandbox_test

import (
	"strings"
	"testing"

	"github.com/crabbox-dev/crabbox/providers/opensandbox"
)

// Doctor says the key is accepted and how sandboxes are made; a wrong key
// fails the check without showing the key.
func TestDoctor(t *testing.T) {
	f := newFake(t)
	ctx := testContext(t)
	checks, err := newBackend(t, f).Doctor(ctx)
	if err != nil || len(checks) != 2 || !checks[0].OK || !checks[1].OK ||
		!strings.Contains(checks[0].Detail, "API key accepted; 0 crabbox sandboxes of owner tester") ||
		!strings.Contains(checks[1].Detail, "image ubuntu:24.04 (cpu 1, memory 2Gi), at most 24h0m0s each; execd reached at each sandbox's own endpoint") {
		t.Errorf("doctor: %+v, %v", checks, err)
	}
	c := config(f)
	c.APIKey = "wrong-secret-key"
	b, err := opensandbox.New(c, opensandboxRuntime(f))
	if err != nil {
		t.Fatal(err)
	}
	checks, err = b.Doctor(ctx)
	if err != nil || len(checks) != 1 || checks[0].OK || !strings.Contains(checks[0].Detail, "HTTP 401 INVALID_API_KEY") || strings.Contains(checks[0].Detail, "wrong-secret-key") {
		t.Errorf("doctor with a wrong key: %+v, %v", checks, err)
	}
}
