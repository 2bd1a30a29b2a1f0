//go:build unix

package e2b_test

import (
	"strings"
	"testing"

	"github.com/crabbox-dev/crabbox/provider"
	"github.com/crabbox-dev/crabbox/provider/providertest"
	"github.com/crabbox-dev/crabbox/providers/e2b"
)

func TestDoctor(t *testing.T) {
	f := newFake(t)
	ctx := testContext(t)
	b := newBackend(t, f)
	warmup(t, ctx, b, "")
	checks, err := b.Doctor(ctx)
	if err != nil {
		t.Fatal(err)
	}
	providertest.CheckDoctor(t, checks, map[string]bool{"e2b API": true, "e2b sandboxes": true},
		map[string]string{"e2b API": "1 crabbox sandbox", "e2b sandboxes": "template base"})

	bad, err := e2b.New(e2b.Config{APIKey: "wrong-key", APIURL: f.api.URL, SandboxURL: f.envd.URL},
		provider.Runtime{HTTPClient: f.client()})
	if err != nil {
		t.Fatal(err)
	}
	checks, err = bad.Doctor(ctx)
	if err != nil {
		t.Fatal(err)
	}
	providertest.CheckDoctor(t, checks, map[string]bool{"e2b API": false}, map[string]string{"e2b API": "401"})
	for _, c := range checks {
		if strings.Contains(c.Detail, "wrong-key") {
			t.Errorf("check %q shows the API key: %s", c.Name, c.Detail)
		}
	}
}
