package local

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"

	"github.com/crabbox-dev/crabbox/provider"
)

var _ provider.DoctorBackend = (*Backend)(nil)

// Doctor checks, leaving nothing behind, that a box can be made here: the
// root directory is writable (or can be created: its nearest existing
// parent is writable), a box's SSH server can listen on 127.0.0.1, and the
// agent program, when one is set, is found and executable.
func (b *Backend) Doctor(_ context.Context) ([]provider.Check, error) {
	root := provider.Check{Name: "root directory"}
	if err := writable(b.cfg.Root); err != nil {
		root.Detail = fmt.Sprintf("%v: choose another with --local-root or CRABBOX_LOCAL_ROOT", err)
	} else {
		root.OK, root.Detail = true, b.cfg.Root
	}

	listen := provider.Check{Name: "loopback listener"}
	if l, err := net.Listen("tcp", "127.0.0.1:0"); err != nil {
		listen.Detail = fmt.Sprintf("a box's SSH server cannot listen on 127.0.0.1: %v", err)
	} else {
		listen.OK, listen.Detail = true, "boxes can listen on 127.0.0.1"
		l.Close()
	}

	checks := []provider.Check{root, listen}
	agent := provider.Check{Name: "agent"}
	if b.cfg.Agent == "" {
		agent.OK, agent.Detail = true, "none: boxes are served in-process and end with it"
	} else if path, err := exec.LookPath(b.cfg.Agent); err != nil {
		agent.Detail = fmt.Sprintf("%s: %v: set --local-agent or CRABBOX_LOCAL_AGENT to a crabbox executable", b.cfg.Agent, err)
	} else {
		agent.OK, agent.Detail = true, path
	}
	return append(checks, agent), nil
}

// writable reports why files cannot be made in dir, or in the directory it
// would be created in when it does not exist yet. It creates one temporary
// file and removes it again.
func writable(dir string) error {
	probe := dir
	for {
		fi, err := os.Stat(probe)
		if err == nil {
			if !fi.IsDir() {
				return fmt.Errorf("%s is not a directory", probe)
			}
			break
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		parent := filepath.Dir(probe)
		if parent == probe {
			return err
		}
		probe = parent
	}
	f, err := os.CreateTemp(probe, ".doctor-*")
	if err != nil {
		if probe != dir {
			return fmt.Errorf("%s does not exist and cannot be created: %w", dir, err)
		}
		return fmt.Errorf("%s is not writable: %w", dir, err)
	}
	f.Close()
	return os.Remove(f.Name())
}
