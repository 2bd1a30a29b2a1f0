//go:build unix

package vercel_test

import (
	"bytes"
	"cmp"
	"context"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/crabbox-dev/crabbox/internal/logbuf"
	"github.com/crabbox-dev/crabbox/lease"
	"github.com/crabbox-dev/crabbox/provider"
	"github.com/crabbox-dev/crabbox/providers/vercel"
)

// env is a fake API, a fake clock and a backend speaking to them.
type env struct {
	t     *testing.T
	clock *clockwork.FakeClock
	fake  *fakeVercel
	b     *vercel.Backend
	log   *logbuf.Buffer
}

func newEnv(t *testing.T) *env {
	t.Helper()
	clock := clockwork.NewFakeClockAt(time.Now().UTC().Truncate(time.Millisecond))
	f := newFake(t, clock)
	e := &env{t: t, clock: clock, fake: f, log: &logbuf.Buffer{}}
	e.b = e.backend(vercel.Config{})
	return e
}

// backend returns a backend for the fake, logging to the test and e.log.
func (e *env) backend(c vercel.Config) *vercel.Backend {
	e.t.Helper()
	log := slog.New(slog.NewTextHandler(io.MultiWriter(e.t.Output(), e.log), &slog.HandlerOptions{Level: slog.LevelDebug}))
	return newBackend(e.t, e.fake, c, provider.Runtime{Clock: e.clock, Logger: log})
}

// newBackend returns a backend speaking to the fake; fields set in c win
// over the fake's token, team, project, endpoint and work root.
func newBackend(t *testing.T, f *fakeVercel, c vercel.Config, rt provider.Runtime) *vercel.Backend {
	t.Helper()
	c.Token = cmp.Or(c.Token, testToken)
	c.Team = cmp.Or(c.Team, testTeam)
	c.Project = cmp.Or(c.Project, testProject)
	c.Endpoint = cmp.Or(c.Endpoint, f.URL)
	c.WorkRoot = cmp.Or(c.WorkRoot, f.dir+"/work")
	client := *f.srv.Client()
	client.Timeout = 30 * time.Second
	rt.HTTPClient = &client
	b, err := vercel.New(c, rt)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// warmup makes a lease expiring in 30 minutes.
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

// checkNoToken fails if the token appears in s.
func checkNoToken(t *testing.T, what, s string) {
	t.Helper()
	if strings.Contains(s, testToken) {
		t.Errorf("%s contains the token: %s", what, s)
	}
}

// signalWriter collects output and closes seen once it contains want.
type signalWriter struct {
	logbuf.Buffer
	want string
	seen chan struct{}
	once sync.Once
}

func newSignalWriter(want string) *signalWriter {
	return &signalWriter{want: want, seen: make(chan struct{})}
}

func (w *signalWriter) Write(p []byte) (int, error) {
	n, err := w.Buffer.Write(p)
	if strings.Contains(w.String(), w.want) {
		w.once.Do(func() { close(w.seen) })
	}
	return n, err
}
