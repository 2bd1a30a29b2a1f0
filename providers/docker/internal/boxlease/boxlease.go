// Package boxlease is what the docker provider hands a box's agent on its
// standard input when the container starts: the files of the lease
// directory the agent serves (the lease record and the box's private host
// key). Handing them over on the container's stdin costs nothing beyond
// the attach that reads the agent's "ready" line anyway, where copying
// them into the container with the engine's archive API costs a mount of
// the container's filesystem; and the host key never appears in the
// container's configuration, an argument or the environment.
package boxlease

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"

	"github.com/crabbox-dev/crabbox/internal/hexid"
	"github.com/crabbox-dev/crabbox/providers/local"
)

// maxSize bounds a payload, so that a broken writer cannot make the agent
// read without end.
const maxSize = 1 << 20

// Payload is the content of a new lease directory.
type Payload struct {
	// Record is the content of local.RecordFile.
	Record []byte `json:"record"`
	// HostKey is the content of local.HostKeyFile: the box's private host
	// key, which the provider made so that the first connection is
	// already strict.
	HostKey []byte `json:"hostKey"`
	// WorkRoot is the directory under which commands work, made if
	// missing (mode 0755).
	WorkRoot string `json:"workRoot"`
	// FromCheckpoint says that the container's image is a checkpoint of
	// a box: the lease directories it holds (that box's, and the new
	// lease's own for a restore) are removed before the install.
	FromCheckpoint bool `json:"fromCheckpoint,omitempty"`
}

// Write writes p to w as one JSON document.
func Write(w io.Writer, p Payload) error {
	return json.NewEncoder(w).Encode(p)
}

// Read reads one payload written by Write. It does not wait for the end of
// r after the document.
func Read(r io.Reader) (Payload, error) {
	var p Payload
	dec := json.NewDecoder(io.LimitReader(r, maxSize))
	if err := dec.Decode(&p); err != nil {
		if errors.Is(err, io.EOF) {
			return Payload{}, errors.New("lease payload: the input ended before it")
		}
		return Payload{}, fmt.Errorf("lease payload: %w", err)
	}
	switch {
	case len(p.Record) == 0:
		return Payload{}, errors.New("lease payload: no lease record")
	case len(p.HostKey) == 0:
		return Payload{}, errors.New("lease payload: no host key")
	case p.WorkRoot != "" && (!path.IsAbs(p.WorkRoot) || path.Clean(p.WorkRoot) != p.WorkRoot):
		return Payload{}, fmt.Errorf("lease payload: work root %q is not a clean absolute path", p.WorkRoot)
	}
	if _, err := local.DecodeRecord(p.Record); err != nil {
		return Payload{}, fmt.Errorf("lease payload: %w", err)
	}
	return p, nil
}

// Install makes the lease directory dir (mode 0700, which must not exist
// yet unless p.FromCheckpoint) with p's files, the lease's work directory,
// and p's work root. With p.FromCheckpoint it first removes dir and the
// lease directories beside it (named by lease IDs; nothing else).
func (p Payload) Install(dir string) error {
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		return err
	}
	if p.FromCheckpoint {
		if err := removeLeaseDirs(filepath.Dir(dir)); err != nil {
			return fmt.Errorf("lease directories of the checkpoint: %w", err)
		}
	}
	if err := os.Mkdir(dir, 0o700); err != nil {
		return fmt.Errorf("lease directory: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, local.HostKeyFile), p.HostKey, 0o600); err != nil {
		return err
	}
	if err := os.Mkdir(filepath.Join(dir, local.WorkDir), 0o700); err != nil {
		return err
	}
	if p.WorkRoot != "" {
		if err := os.MkdirAll(p.WorkRoot, 0o755); err != nil {
			return fmt.Errorf("work root: %w", err)
		}
	}
	// The record last: an agent or a reader that finds it finds the rest.
	return os.WriteFile(filepath.Join(dir, local.RecordFile), p.Record, 0o600)
}

// removeLeaseDirs removes the lease directories in parent.
func removeLeaseDirs(parent string) error {
	entries, err := os.ReadDir(parent)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if e.IsDir() && hexid.Valid(e.Name(), "cbx_", 12) {
			if err := os.RemoveAll(filepath.Join(parent, e.Name())); err != nil {
				return err
			}
		}
	}
	return nil
}
