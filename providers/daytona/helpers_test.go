//go:build unix

package daytona_test

import (
	"bytes"
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/crabbox-dev/crabbox/lease"
	"github.com/crabbox-dev/crabbox/provider"
	"github.com/crabbox-dev/crabbox/providers/daytona"
)

// newBackend returns a backend speaking to f, with a fast poll.
// testConfig is the configuration of a backend speaking to f, with a
// fast poll.
func testConfig(f *fakeDaytona) daytona.Config {
	return daytona.Config{
		APIKey: f.key, APIURL: f.server.URL + "/api", Owner: "tester",
		PollInterval: 5 * time.Millisecond, StartTimeout: time.Minute,
	}
}

func newBackend(t *testing.T, f *fakeDaytona, edit ...func(*daytona.Config)) *daytona.Backend {
	t.Helper()
	c := testConfig(f)
	for _, e := range edit {
		e(&c)
	}
	b, err := daytona.New(c, provider.Runtime{HTTPClient: f.server.Client()})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func warmupRequest(slug string) provider.WarmupRequest {
	return provider.WarmupRequest{
		LeaseID: lease.NewID(), Slug: slug, TTL: 90 * time.Minute, IdleTimeout: 30 * time.Minute,
		ExpiresAt: time.Now().Add(30 * time.Minute), Labels: map[string]string{"team": "infra"},
	}
}

func warmup(t *testing.T, ctx context.Context, b *daytona.Backend, slug string) provider.LeaseView {
	t.Helper()
	v, err := b.Warmup(ctx, warmupRequest(slug))
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// signalWriter collects output and closes seen once it contains want.
type signalWriter struct {
	want string
	seen chan struct{}

	mu   sync.Mutex
	buf  bytes.Buffer
	once sync.Once
}

func newSignalWriter(want string) *signalWriter {
	return &signalWriter{want: want, seen: make(chan struct{})}
}

func (w *signalWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf.Write(p)
	if strings.Contains(w.buf.String(), w.want) {
		w.once.Do(func() { close(w.seen) })
	}
	return len(p), nil
}

func (w *signalWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String()
}
