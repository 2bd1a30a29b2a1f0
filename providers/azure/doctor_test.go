package azure_test

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

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
			got := map[string]bool{}
			for _, c := range checks {
				got[c.Name] = c.OK
				if want, ok := tt.details[c.Name]; ok && !strings.Contains(c.Detail, want) {
					t.Errorf("check %q: detail %q, want it to contain %q", c.Name, c.Detail, want)
				}
				if strings.Contains(c.Detail, secret) {
					t.Errorf("check %q shows the secret: %q", c.Name, c.Detail)
				}
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("Doctor (-want +got):\n%s\n%+v", diff, checks)
			}
			if ev := e.arm.log(); len(ev) != 0 {
				t.Errorf("Doctor changed the subscription: %v", ev)
			}
		})
	}
}
