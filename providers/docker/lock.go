package docker

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/gofrs/flock"

	"github.com/crabbox-dev/crabbox/lease"
)

// An acquire in progress holds a lock on <StateDir>/acquiring/<leaseID>
// from before it creates the container until it has returned (after a
// rollback, if any) and removed the file. The operating system drops the
// lock when the process dies, however it dies, so a lock file that is
// still there but not locked is the mark of an acquire whose process is
// gone: its container will never be finished or rolled back by anyone
// else, and Cleanup deletes it at once instead of waiting for its expiry.

// acquireState is what the lock files say about a lease's acquire.
type acquireState int

const (
	acquireUnknown   acquireState = iota // no state directory: nothing is known
	acquireDone                          // no lock file: finished, or never started here
	acquireRunning                       // the lock is held: an acquire is in progress
	acquireAbandoned                     // the lock file is there, unlocked: its process died
)

func (s acquireState) String() string {
	return [...]string{"unknown", "done", "running", "abandoned"}[s]
}

func (b *Backend) lockDir() string {
	if b.cfg.StateDir == "" {
		return ""
	}
	return filepath.Join(b.cfg.StateDir, "acquiring")
}

// lockAcquire takes the acquire lock of lease id. The returned function
// removes the lock file and then drops the lock; with no state directory
// both are no-ops.
func (b *Backend) lockAcquire(id string) (unlock func() error, err error) {
	dir := b.lockDir()
	if dir == "" {
		return func() error { return nil }, nil
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("acquire lock directory: %w", err)
	}
	p := filepath.Join(dir, id)
	for {
		fl := flock.New(p, flock.SetPermissions(0o600))
		if err := fl.Lock(); err != nil {
			return nil, fmt.Errorf("acquire lock %s: %w", p, err)
		}
		// A cleanup may have removed the file between its creation and our
		// lock; then the lock guards nothing, so take it again.
		if linked(fl) {
			return func() error {
				err := os.Remove(p)
				if errors.Is(err, fs.ErrNotExist) {
					err = nil
				}
				return errors.Join(err, fl.Close())
			}, nil
		}
		if err := fl.Close(); err != nil {
			return nil, err
		}
	}
}

// linked reports whether fl's locked file is still the one at its path.
func linked(fl *flock.Flock) bool {
	held, err := fl.Stat()
	if err != nil {
		return false
	}
	now, err := os.Stat(fl.Path())
	return err == nil && os.SameFile(held, now)
}

// probeAcquire says what the lock files know about lease id's acquire. For
// an abandoned acquire it returns the lock still held, so the caller can
// delete the container first; release(true) then removes the lock file,
// release(false) leaves it for a later cleanup. Otherwise release is a
// no-op.
func (b *Backend) probeAcquire(id string) (st acquireState, release func(remove bool), err error) {
	noop := func(bool) {}
	dir := b.lockDir()
	if dir == "" {
		return acquireUnknown, noop, nil
	}
	p := filepath.Join(dir, id)
	fl := flock.New(p, flock.SetFlag(os.O_RDWR)) // never creates the file
	ok, err := fl.TryLock()
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return acquireDone, noop, nil
	case err != nil:
		return acquireUnknown, noop, fmt.Errorf("probe acquire lock %s: %w", p, err)
	case !ok:
		_ = fl.Close()
		return acquireRunning, noop, nil
	case !linked(fl):
		_ = fl.Close() // the acquire finished while we opened the file
		return acquireDone, noop, nil
	}
	return acquireAbandoned, func(remove bool) {
		if remove {
			_ = os.Remove(p)
		}
		_ = fl.Close()
	}, nil
}

// sweepLocks removes the lock files of abandoned acquires that left no
// container (their process died before creating one), except those in
// skip.
func (b *Backend) sweepLocks(skip map[string]bool) error {
	dir := b.lockDir()
	if dir == "" {
		return nil
	}
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("acquire locks: %w", err)
	}
	for _, e := range entries {
		id := e.Name()
		if skip[id] || !lease.IsID(id) {
			continue
		}
		st, release, err := b.probeAcquire(id)
		if err != nil {
			return err
		}
		if st == acquireAbandoned {
			b.rt.Logger.Debug("removing the lock of an abandoned acquire", "lease", id)
		}
		release(true)
	}
	return nil
}
