package aws_test

import (
	"context"
	"strings"
	"testing"

	"github.com/crabbox-dev/crabbox/provider/providertest"
	"github.com/crabbox-dev/crabbox/providers/aws"
	"github.com/crabbox-dev/crabbox/providers/aws/internal/fakeec2"
)

func TestDoctor(t *testing.T) {
	tests := []struct {
		name    string
		env     map[string]string
		edit    func(*aws.Config)
		fault   *fakeec2.Fault
		want    map[string]bool
		details map[string]string
	}{
		{
			name: "ready",
			want: map[string]bool{"ssh-cidr": true, "credentials": true, "EC2 API " + region: true, "image": true},
		},
		{
			name:    "credentials from the environment",
			env:     map[string]string{"AWS_ACCESS_KEY_ID": "AKIAENVIRONMENT00001", "AWS_SECRET_ACCESS_KEY": fakeSecret},
			edit:    func(c *aws.Config) { c.Credentials = nil },
			want:    map[string]bool{"ssh-cidr": true, "credentials": true, "EC2 API " + region: true, "image": true},
			details: map[string]string{"credentials": "found (EnvConfigCredentials)"},
		},
		{
			name:    "no credentials and no ssh-cidr",
			edit:    func(c *aws.Config) { c.Credentials, c.SSHCIDR = nil, "" },
			want:    map[string]bool{"ssh-cidr": false, "credentials": false},
			details: map[string]string{"ssh-cidr": "--aws-ssh-cidr or CRABBOX_AWS_SSH_CIDR", "credentials": "--aws-profile or CRABBOX_AWS_PROFILE"},
		},
		{
			name:    "credentials rejected",
			fault:   &fakeec2.Fault{Action: "DescribeVpcs", Code: "AuthFailure", Message: "not allowed", Times: 1},
			want:    map[string]bool{"ssh-cidr": true, "credentials": true, "EC2 API " + region: false},
			details: map[string]string{"EC2 API " + region: "AuthFailure"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			isolateSDK(t)
			for k, v := range tt.env {
				t.Setenv(k, v)
			}
			w := newWorld(t)
			var edits []func(*aws.Config)
			if tt.edit != nil {
				edits = append(edits, tt.edit)
			}
			b := w.backend(t, edits...)
			if tt.fault != nil {
				w.ec2.Inject(*tt.fault)
			}
			checks, err := b.Doctor(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			providertest.CheckDoctor(t, checks, tt.want, tt.details)
			for _, c := range checks {
				if strings.Contains(c.Detail, fakeSecret) || strings.Contains(c.Detail, fakeAccessKey) {
					t.Errorf("check %q shows a credential: %q", c.Name, c.Detail)
				}
			}
			for _, c := range w.ec2.Calls() {
				if !strings.HasPrefix(c.Action, "Describe") {
					t.Errorf("Doctor called %s", c.Action)
				}
			}
		})
	}
}
