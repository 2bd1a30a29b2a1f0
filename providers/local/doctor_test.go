package local

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/crabbox-dev/crabbox/provider/providertest"
)

func TestDoctor(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		cfg     Config
		want    map[string]bool
		details map[string]string
	}{
		{
			name: "root to be created",
			cfg:  Config{Root: filepath.Join(dir, "new", "root")},
			want: map[string]bool{"root directory": true, "loopback listener": true, "agent": true},
		},
		{
			name: "agent",
			cfg:  Config{Root: dir, Agent: agentPath(t)},
			want: map[string]bool{"root directory": true, "loopback listener": true, "agent": true},
		},
		{
			name:    "root under a file",
			cfg:     Config{Root: filepath.Join(file, "root")},
			want:    map[string]bool{"root directory": false, "loopback listener": true, "agent": true},
			details: map[string]string{"root directory": "--local-root or CRABBOX_LOCAL_ROOT"},
		},
		{
			name:    "agent not found",
			cfg:     Config{Root: dir, Agent: filepath.Join(dir, "no-such-agent")},
			want:    map[string]bool{"root directory": true, "loopback listener": true, "agent": false},
			details: map[string]string{"agent": "--local-agent or CRABBOX_LOCAL_AGENT"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := newBackend(t, tt.cfg, nil)
			checks, err := b.Doctor(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			providertest.CheckDoctor(t, checks, tt.want, tt.details)
			if _, err := os.Stat(tt.cfg.Root); err == nil && tt.cfg.Root != dir {
				t.Errorf("Doctor created %s", tt.cfg.Root)
			}
			entries, err := os.ReadDir(dir)
			if err != nil {
				t.Fatal(err)
			}
			if len(entries) != 1 {
				t.Errorf("Doctor left files in %s: %v", dir, entries)
			}
		})
	}
}
