package auth

import (
	"io/fs"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestLoadConfig(t *testing.T) {
	files := map[string]string{"/run/secrets/session": string(secret) + "\n", "/run/secrets/empty": "\n"}
	readFile := func(p string) ([]byte, error) {
		v, ok := files[p]
		if !ok {
			return nil, &fs.PathError{Op: "open", Path: p, Err: fs.ErrNotExist}
		}
		return []byte(v), nil
	}
	tests := []struct {
		name    string
		env     map[string]string
		want    Config
		wantErr string
	}{
		{
			name: "all",
			env: map[string]string{
				"CRABBOX_ADMIN_TOKEN": "a-token", "CRABBOX_SHARED_TOKEN": "s-token", "CRABBOX_SHARED_OWNER": "ops",
				"CRABBOX_SESSION_SECRET_FILE": "/run/secrets/session", "CRABBOX_ADMIN_OWNERS": "root, ada ,",
				"CRABBOX_DEFAULT_ORG": "acme",
			},
			want: Config{AdminToken: "a-token", SharedToken: "s-token", SharedOwner: "ops", SessionSecret: string(secret),
				AdminOwners: []string{"root", "ada"}, DefaultOrg: "acme"},
		},
		{name: "admin only", env: map[string]string{"CRABBOX_ADMIN_TOKEN": "a"},
			want: Config{AdminToken: "a", DefaultOrg: "default"}},
		{name: "nothing", env: map[string]string{}, wantErr: "no credentials"},
		{name: "both forms", env: map[string]string{"CRABBOX_ADMIN_TOKEN": "a", "CRABBOX_ADMIN_TOKEN_FILE": "/x"}, wantErr: "both"},
		{name: "missing file", env: map[string]string{"CRABBOX_ADMIN_TOKEN_FILE": "/nope"}, wantErr: "/nope"},
		{name: "empty file", env: map[string]string{"CRABBOX_ADMIN_TOKEN_FILE": "/run/secrets/empty"}, wantErr: "empty"},
		{name: "short secret", env: map[string]string{"CRABBOX_SESSION_SECRET": "too-short-secret"}, wantErr: "at least 32"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := LoadConfig(func(k string) string { return tt.env[k] }, readFile)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("LoadConfig error = %v, want %q", err, tt.wantErr)
				}
				for _, v := range tt.env {
					if len(v) > 8 && strings.Contains(err.Error(), v) && !strings.HasPrefix(v, "/") {
						t.Errorf("error %q leaks a secret", err)
					}
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("config (-want +got):\n%s", diff)
			}
		})
	}
}
