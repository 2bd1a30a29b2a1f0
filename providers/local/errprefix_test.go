package local

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/crabbox-dev/crabbox/lease"
)

// A failed acquire through the lease layer names the provider and the
// lease once: the provider leaves that prefix to its caller.
func TestAcquireErrorHasOnePrefix(t *testing.T) {
	store, err := lease.OpenStore(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	b := newBackend(t, Config{Root: t.TempDir(), Agent: filepath.Join(t.TempDir(), "no-such-agent")}, nil)
	_, err = store.Acquire(context.Background(), b, lease.Terms{})
	if err == nil {
		t.Fatal("Acquire with a missing agent succeeded")
	}
	msg := err.Error()
	if n := strings.Count(msg, "acquire local lease"); n != 1 {
		t.Errorf("error %q says %q %d times, want once", msg, "acquire local lease", n)
	}
	if !strings.HasPrefix(msg, "acquire local lease cbx_") {
		t.Errorf("error %q, want it to start with the lease layer's prefix", msg)
	}
}
