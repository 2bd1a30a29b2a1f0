package ssh_test

import (
	"context"
	"net"
	"testing"

	"github.com/crabbox-dev/crabbox/provider/providertest"
	sshp "github.com/crabbox-dev/crabbox/providers/ssh"
)

func TestDoctor(t *testing.T) {
	h := startHost(t)
	closed := func() int {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		l.Close()
		return port
	}()
	tests := []struct {
		name    string
		cfg     func() sshp.Config
		want    map[string]bool
		details map[string]string
	}{
		{
			name: "working host",
			cfg:  func() sshp.Config { return h.config(t) },
			want: map[string]bool{"host": true, "key file": true, "host reachable": true},
		},
		{
			name: "no host and no key",
			cfg:  func() sshp.Config { return sshp.Config{User: "me"} },
			want: map[string]bool{"host": false, "key file": false, "host reachable": false},
			details: map[string]string{
				"host":     "--ssh-host, CRABBOX_SSH_HOST or ssh-host in the config file",
				"key file": "--ssh-key, CRABBOX_SSH_KEY or ssh-key in the config file",
			},
		},
		{
			name: "host does not answer",
			cfg: func() sshp.Config {
				c := h.config(t)
				c.Port = closed
				return c
			},
			want:    map[string]bool{"host": true, "key file": true, "host reachable": false},
			details: map[string]string{"host reachable": "cannot connect to"},
		},
		{
			name: "key file is not a key",
			cfg: func() sshp.Config {
				c := h.config(t)
				c.KeyFile = keyFile(t)
				return c
			},
			want:    map[string]bool{"host": true, "key file": false, "host reachable": true},
			details: map[string]string{"key file": "--ssh-key"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := newBackend(t, tt.cfg(), t.TempDir())
			checks, err := b.Doctor(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			providertest.CheckDoctor(t, checks, tt.want, tt.details)
		})
	}
}
