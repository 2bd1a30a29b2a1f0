//go:build unix

package upstashbox_test

import (
	"bytes"
	"cmp"
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/crabbox-dev/crabbox/internal/logbuf"
	"github.com/crabbox-dev/crabbox/lease"
	"github.com/crabbox-dev/crabbox/provider"
	"github.com/crabbox-dev/crabbox/providers/upstashbox"
)

// env is a fake API, a fake clock and a backend speaking to them.
type env struct {
	t     *testing.T
	clock *clockwork.FakeClock
	fake  *fakeBox
	b     *upstashbox.Backend
	log   *logbuf.Buffer
}

func newEnv(t *testing.T) *env {
	t.Helper()
	clock := clockwork.NewFakeClockAt(time.Now().UTC().Truncate(time.Second))
	f := newFake(t, clock)
	e := &env{t: t, clock: clock, fake: f, log: &logbuf.Buffer{}}
	e.b = e.backend(upstashbox.Config{})
	return e
}

// backend returns a backend for the fake, logging to the test and e.log.
func (e *env) backend(c upstashbox.Config) *upstashbox.Backend {
	e.t.Helper()
	log := slog.New(slog.NewTextHandler(io.MultiWriter(e.t.Output(), e.log), &slog.HandlerOptions{Level: slog.LevelDebug}))
	return newBackend(e.t, e.fake, c, provider.Runtime{Clock: e.clock, Logger: log})
}

// newBackend returns a backend speaking to the fake; fields set in c win
// over the fake's key, base URL and work root.
func newBackend(t *testing.T, f *fakeBox, c upstashbox.Config, rt provider.Runtime) *upstashbox.Backend {
	t.Helper()
	c.APIKey = cmp.Or(c.APIKey, testKey)
	c.BaseURL = cmp.Or(c.BaseURL, f.URL)
	c.WorkRoot = cmp.Or(c.WorkRoot, f.dir+"/work")
	c.KillGrace = cmp.Or(c.KillGrace, time.Second)
	client := *f.srv.Client()
	client.Timeout = 30 * time.Second
	rt.HTTPClient = &client
	b, err := upstashbox.New(c, rt)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// warmup makes a lease with a one-hour TTL.
func (e *env) warmup(slug string, labels map[string]string) provider.LeaseView {
	e.t.Helper()
	now := e.clock.Now()
	v, err := e.b.Warmup(context.Background(), provider.WarmupRequest{
		LeaseID: lease.NewID(), Slug: slug, TTL: time.Hour, IdleTimeout: 30 * time.Minute,
		ExpiresAt: now.Add(30 * time.Minute), Labels: labels,
	})
	if err != nil {
		e.t.Fatalf("Warmup: %v", err)
	}
	return v
}

// run runs cmd in dir and returns its exit code, stdout and stderr.
func (e *env) run(ctx context.Context, id, dir string, cmd ...string) (int, string, string, error) {
	var stdout, stderr bytes.Buffer
	res, err := e.b.Run(ctx, provider.DelegatedRunRequest{LeaseID: id, Command: cmd, Dir: dir, Stdout: &stdout, Stderr: &stderr})
	return res.ExitCode, stdout.String(), stderr.String(), err
}

// checkNoKey fails if the API key appears in s.
func checkNoKey(t *testing.T, what, s string) {
	t.Helper()
	if strings.Contains(s, testKey) {
		t.Errorf("%s contains the API key: %s", what, s)
	}
}
