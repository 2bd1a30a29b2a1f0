package run

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// Capture is a local file that a command's output stream is also written
// to. It is written under a temporary name beside Path and moved there by
// Finish, or removed, so an existing file is replaced only at the end, and
// only when the caller allowed it.
type Capture struct {
	kind string
	path string
	f    *os.File
	made []string // directories created for it, deepest first
	err  error    // the first write error
	size int64
}

// CreateCapture starts capturing a stream of the given kind (KindStdout or
// KindStderr) to the local file path, creating its missing directories
// (which Finish removes again when the file is not kept). An existing file
// at path is an error wrapping ErrFileExists, unless overwrite is set.
func CreateCapture(kind, path string, overwrite bool) (*Capture, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("capture %s to %s: %w", kind, path, err)
	}
	fi, err := os.Stat(abs)
	switch {
	case err == nil && fi.IsDir():
		return nil, fmt.Errorf("capture %s to %s: a directory is there", kind, abs)
	case err == nil && !overwrite:
		return nil, fmt.Errorf("capture %s to %s: the local file %w", kind, abs, ErrFileExists)
	case err != nil && !errors.Is(err, fs.ErrNotExist):
		return nil, fmt.Errorf("capture %s to %s: %w", kind, abs, err)
	}
	made, err := mkdirAll(filepath.Dir(abs))
	if err != nil {
		return nil, fmt.Errorf("capture %s to %s: create its directory: %w", kind, abs, err)
	}
	f, err := os.CreateTemp(filepath.Dir(abs), "."+filepath.Base(abs)+".crabbox-*")
	if err != nil {
		removeDirs(made)
		return nil, fmt.Errorf("capture %s to %s: %w", kind, abs, err)
	}
	return &Capture{kind: kind, path: abs, f: f, made: made}, nil
}

// Write writes p to the file. After a failed write it writes nothing
// more; Finish reports the error. It never fails, so that a full disk
// does not stop the command whose output it captures.
func (c *Capture) Write(p []byte) (int, error) {
	if c.err == nil {
		n, err := c.f.Write(p)
		c.size += int64(n)
		c.err = err
	}
	return len(p), nil
}

// Finish closes the capture and, when keep is set, moves it into place;
// otherwise it removes it, and the directories made for it. Kept, it
// returns the file as an Artifact.
func (c *Capture) Finish(keep bool) (Artifact, bool, error) {
	err := errors.Join(c.err, c.f.Close())
	if keep && err == nil {
		err = os.Rename(c.f.Name(), c.path)
	}
	if !keep || err != nil {
		_ = os.Remove(c.f.Name())
		removeDirs(c.made)
	}
	if err != nil {
		return Artifact{}, false, fmt.Errorf("capture %s to %s: %w", c.kind, c.path, err)
	}
	return Artifact{Kind: c.kind, Local: c.path, Size: c.size}, keep, nil
}
