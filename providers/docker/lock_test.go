package docker

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/crabbox-dev/crabbox/lease"
)

func TestAcquireLocks(t *testing.T) {
	probe := func(b *Backend, id string) (acquireState, func(bool)) {
		t.Helper()
		st, release, err := b.probeAcquire(id)
		if err != nil {
			t.Fatal(err)
		}
		return st, release
	}
	b := newBackendWith(t, Config{StateDir: t.TempDir()})
	id := lease.NewID()
	if st, _ := probe(b, id); st != acquireDone {
		t.Errorf("no lock file: state %s, want done", st)
	}

	unlock, err := b.lockAcquire(id)
	if err != nil {
		t.Fatal(err)
	}
	if st, _ := probe(b, id); st != acquireRunning {
		t.Errorf("lock held: state %s, want running", st)
	}
	if err := unlock(); err != nil {
		t.Fatal(err)
	}
	if st, _ := probe(b, id); st != acquireDone {
		t.Errorf("acquire finished: state %s, want done", st)
	}

	// A process that died mid-acquire left its lock file, unlocked.
	dead := filepath.Join(b.lockDir(), id)
	if err := os.WriteFile(dead, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	st, release := probe(b, id)
	if st != acquireAbandoned {
		t.Errorf("lock file left by a dead process: state %s, want abandoned", st)
	}
	if st2, _ := probe(b, id); st2 != acquireRunning {
		t.Errorf("while one cleanup holds an abandoned lock, another sees state %s, want running", st2)
	}
	release(false) // e.g. a dry run, or the container could not be deleted
	if st, release = probe(b, id); st != acquireAbandoned {
		t.Errorf("after release(false): state %s, want abandoned still", st)
	}
	release(true)
	if st, _ := probe(b, id); st != acquireDone {
		t.Errorf("after release(true): state %s, want done", st)
	}

	// sweepLocks removes abandoned lock files except those it is told to skip.
	other := lease.NewID()
	for _, name := range []string{id, other} {
		if err := os.WriteFile(filepath.Join(b.lockDir(), name), nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.sweepLocks(map[string]bool{other: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(b.lockDir(), id)); !os.IsNotExist(err) {
		t.Errorf("sweep left the abandoned lock of %s: %v", id, err)
	}
	if _, err := os.Stat(filepath.Join(b.lockDir(), other)); err != nil {
		t.Errorf("sweep removed the skipped lock of %s: %v", other, err)
	}

	none := newBackendWith(t, Config{})
	if st, _ := probe(none, id); st != acquireUnknown {
		t.Errorf("no state directory: state %s, want unknown", st)
	}
}
