package main

import (
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// doctor exits 125 when the selected provider cannot work as configured,
// and its output says how to set what is missing; a working provider
// exits 0.
func TestDoctorExitCode(t *testing.T) {
	t.Parallel()
	aws := t.TempDir()
	noAWS := []string{
		"AWS_CONFIG_FILE=" + filepath.Join(aws, "config"), "AWS_SHARED_CREDENTIALS_FILE=" + filepath.Join(aws, "credentials"),
		"AWS_EC2_METADATA_DISABLED=true", "AWS_PROFILE=", "AWS_ACCESS_KEY_ID=", "AWS_SECRET_ACCESS_KEY=", "AWS_SESSION_TOKEN=",
		"AWS_WEB_IDENTITY_TOKEN_FILE=", "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI=", "AWS_CONTAINER_CREDENTIALS_FULL_URI=",
		"AWS_REGION=us-east-1",
	}
	tests := []struct {
		name string
		env  []string
		args []string
		code int
		want []string
	}{
		{"local works", nil, []string{"doctor", "--provider", "local"}, 0, []string{"local: loopback listener  ok"}},
		{"ssh without host or key", nil, []string{"doctor", "--provider", "ssh"}, exitFailure,
			[]string{"ssh: host", "--ssh-host, CRABBOX_SSH_HOST", "--ssh-key, CRABBOX_SSH_KEY"}},
		{"ssh flags after the command", nil, []string{"doctor", "--provider", "ssh", "--ssh-host", "127.0.0.1", "--ssh-port", "1"}, exitFailure,
			[]string{"ssh: host reachable", "cannot connect to 127.0.0.1:1"}},
		{"aws without credentials", noAWS, []string{"doctor", "--provider", "aws"}, exitFailure,
			[]string{"aws: credentials", "--aws-ssh-cidr or CRABBOX_AWS_SSH_CIDR"}},
		{"gcp without project", nil, []string{"doctor", "--provider", "gcp"}, exitFailure,
			[]string{"provider gcp", "--gcp-project, CRABBOX_GCP_PROJECT or gcp-project in the config file"}},
		{"hetzner without token", []string{"HCLOUD_TOKEN="}, []string{"doctor", "--provider", "hetzner"}, exitFailure,
			[]string{"provider hetzner", "HCLOUD_TOKEN is not set"}},
	}
	programs := programsPath(t) // the clouds' programs
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := crabboxCmd(t, append(append(stateEnv(t), programs), tt.env...), t.TempDir(), tt.args...)
			if r.code != tt.code {
				t.Errorf("%s: exit %d, want %d; stdout %q, stderr %q", strings.Join(tt.args, " "), r.code, tt.code, r.stdout, r.stderr)
			}
			for _, want := range tt.want {
				if !strings.Contains(r.stdout, want) {
					t.Errorf("%s: stdout %q lacks %q", strings.Join(tt.args, " "), r.stdout, want)
				}
			}
		})
	}
}

// doctor --id checks the free space on a warm lease's box, and names the
// state directory's free space too.
func TestDoctorBoxSpace(t *testing.T) {
	t.Parallel()
	env, dir := stateEnv(t), t.TempDir()
	warm := warmLease(t, env, dir)
	r := crabboxCmd(t, env, dir, "doctor", "--id", warm.Slug)
	if r.code != 0 {
		t.Fatalf("doctor --id: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	for _, want := range []*regexp.Regexp{
		regexp.MustCompile(`(?m)^state directory space +(ok|warn) +\S+ \S+ free of `),
		regexp.MustCompile(`(?m)^box space ` + warm.ID + ` +(ok|warn) +\S+ \S+ free of .* at /`),
	} {
		if !want.MatchString(r.stdout) {
			t.Errorf("doctor --id: stdout %q does not match %s", r.stdout, want)
		}
	}
}
