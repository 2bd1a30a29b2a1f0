package gcp_test

import (
	"context"
	"net/http"
	"path/filepath"
	"testing"

	"github.com/crabbox-dev/crabbox/provider/providertest"
	"github.com/crabbox-dev/crabbox/providers/gcp"
)

func TestDoctor(t *testing.T) {
	tests := []struct {
		name    string
		edit    func(*gcp.Config)
		fault   *fault
		setup   func(t *testing.T)
		want    map[string]bool
		details map[string]string
	}{
		{
			name: "ready",
			want: map[string]bool{"source-range": true, "credentials": true, "Compute Engine API " + zones[0]: true},
		},
		{
			name:    "no source-range",
			edit:    func(c *gcp.Config) { c.SourceRange = "" },
			want:    map[string]bool{"source-range": false, "credentials": true, "Compute Engine API " + zones[0]: true},
			details: map[string]string{"source-range": "--gcp-source-range or CRABBOX_GCP_SOURCE_RANGE"},
		},
		{
			name:    "API refuses",
			fault:   &fault{status: http.StatusForbidden, reason: "forbidden"},
			want:    map[string]bool{"source-range": true, "credentials": true, "Compute Engine API " + zones[0]: false},
			details: map[string]string{"Compute Engine API " + zones[0]: "list instances of project " + project},
		},
		{
			// Without an endpoint the SDK looks for Application Default
			// Credentials; a credentials file that does not exist fails
			// before any request.
			name: "no credentials",
			edit: func(c *gcp.Config) { c.Endpoint = "" },
			setup: func(t *testing.T) {
				t.Setenv("GOOGLE_APPLICATION_CREDENTIALS", filepath.Join(t.TempDir(), "missing.json"))
			},
			want:    map[string]bool{"source-range": true, "credentials": false},
			details: map[string]string{"credentials": "GOOGLE_APPLICATION_CREDENTIALS"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.setup != nil {
				tt.setup(t)
			}
			e := newEnv(t)
			var edits []func(*gcp.Config)
			if tt.edit != nil {
				edits = append(edits, tt.edit)
			}
			b := e.backend(t, edits...)
			if tt.fault != nil {
				e.api.setFault(opInstanceList, *tt.fault)
			}
			checks, err := b.Doctor(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			providertest.CheckDoctor(t, checks, tt.want, tt.details)
			if log := e.api.log(); len(log) != 0 {
				t.Errorf("Doctor changed the project: %v", log)
			}
		})
	}
}
