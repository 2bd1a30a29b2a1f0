//go:build unix

package e2b_test

import (
	"bytes"
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/crabbox-dev/crabbox/lease"
	"github.com/crabbox-dev/crabbox/provider"
	"github.com/crabbox-dev/crabbox/providers/e2b"
)

// newBackend returns a backend that talks to f, with work root
// <f.root>/work.
func newBackend(t *testing.T, f *fakeE2B) *e2b.Backend {
	t.Helper()
	b, err := e2b.New(e2b.Config{
		APIKey: f.key, APIURL: f.api.URL, SandboxURL: f.envd.URL, Template: f.template, User: f.user,
		WorkRoot: f.root + "/work", Owner: "tester",
	}, provider.Runtime{Clock: f.clock, HTTPClient: f.client()})
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
func warmup(t *testing.T, ctx context.Context, b *e2b.Backend, slug string) provider.LeaseView {
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
