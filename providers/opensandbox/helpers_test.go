//go:build unix

package opensandbox_test

import (
	"bytes"
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/crabbox-dev/crabbox/lease"
	"github.com/crabbox-dev/crabbox/provider"
	"github.com/crabbox-dev/crabbox/providers/opensandbox"
)

// config is a backend configuration that talks to f, with work root
// <f.root>/work.
func config(f *fakeOpenSandbox) opensandbox.Config {
	return opensandbox.Config{APIKey: f.key, Endpoint: f.api.URL, WorkRoot: f.root + "/work", Owner: "tester"}
}

// newBackend returns a backend that talks to f.
func newBackend(t *testing.T, f *fakeOpenSandbox) *opensandbox.Backend {
	t.Helper()
	return newBackendWith(t, f, config(f))
}

func newBackendWith(t *testing.T, f *fakeOpenSandbox, c opensandbox.Config) *opensandbox.Backend {
	t.Helper()
	b, err := opensandbox.New(c, provider.Runtime{Clock: f.clock, HTTPClient: f.client()})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// warmup makes a lease with a fresh ID and the slug given.
func warmup(t *testing.T, ctx context.Context, b *opensandbox.Backend, slug string) provider.LeaseView {
	t.Helper()
	v, err := b.Warmup(ctx, provider.WarmupRequest{
		LeaseID: lease.NewID(), Slug: slug, TTL: 90 * time.Minute, IdleTimeout: 30 * time.Minute,
		Labels: map[string]string{"team": "crabs"},
	})
	if err != nil {
		t.Fatalf("warmup: %v", err)
	}
	return v
}

// watch is an io.Writer that keeps what is written and calls fn once,
// the first time the output contains marker.
type watch struct {
	mu     sync.Mutex
	buf    bytes.Buffer
	marker string
	fn     func()
	fired  bool
}

func (w *watch) Write(p []byte) (int, error) {
	w.mu.Lock()
	w.buf.Write(p)
	fire := !w.fired && w.marker != "" && strings.Contains(w.buf.String(), w.marker)
	w.fired = w.fired || fire
	w.mu.Unlock()
	if fire {
		w.fn()
	}
	return len(p), nil
}

func (w *watch) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String()
}

func opensandboxRuntime(f *fakeOpenSandbox) provider.Runtime {
	return provider.Runtime{Clock: f.clock, HTTPClient: f.client()}
}
