package azure_test

import (
	"strings"
	"testing"

	"github.com/crabbox-dev/crabbox/provider/providertest"
	"github.com/crabbox-dev/crabbox/providers/azure"
)

func TestDoctor(t *testing.T) {
	const secret = "s3cr3t-client-secret-value"
	tests := []struct {
		name    string
		edit    func(*azure.Config)
		want    map[string]bool
		details map[string]string
	}{
		{
			name: "ready",
			want: map[string]bool{"source-range": true, "Azure API": true},
		},
		{
			name:    "no source-range",
			edit:    func(c *azure.Config) { c.SourceRange = "" },
			want:    map[string]bool{"source-range": false, "Azure API": true},
			details: map[string]string{"source-range": "--azure-source-range or CRABBOX_AZURE_SOURCE_RANGE"},
		},
		{
			name:    "credential refused",
			edit:    func(c *azure.Config) { c.Credential = failingCredential{secret} },
			want:    map[string]bool{"source-range": true, "Azure API": false},
			details: map[string]string{"Azure API": "az login"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t)
			if tt.edit != nil {
				tt.edit(&e.cfg)
			}
			checks, err := e.backend(t).Doctor(testCtx(t))
			if err != nil {
				t.Fatal(err)
			}
			providertest.CheckDoctor(t, checks, tt.want, tt.details)
			for _, c := range checks {
				if strings.Contains(c.Detail, secret) {
					t.Errorf("check %q shows the secret: %q", c.Name, c.Detail)
				}
			}
			if ev := e.arm.log(); len(ev) != 0 {
				t.Errorf("Doctor changed the subscription: %v", ev)
			}
		})
	}
}
