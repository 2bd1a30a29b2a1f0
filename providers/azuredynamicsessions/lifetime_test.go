//go:build unix

package azuredynamicsessions_test

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/crabbox-dev/crabbox/lease"
	"github.com/crabbox-dev/crabbox/provider"
)

// The pool ends a session idle for its cooldown whatever crabbox asks:
// a lease whose idle timeout is longer is refused with an error naming
// the cooldown and how to change it, and no session is left; one within
// the cooldown is made, expiring when the lease asked.
func TestIdleTimeoutBeyondCooldownRefused(t *testing.T) {
	e := newEnv(t, 5*time.Minute)
	now := e.clock.Now()
	req := provider.WarmupRequest{LeaseID: lease.NewID(), Slug: "too-idle", TTL: time.Hour, IdleTimeout: 30 * time.Minute,
		ExpiresAt: lease.ExpiresAt(now, now, time.Hour, 30*time.Minute)}
	_, err := e.b.Warmup(context.Background(), req)
	if !errors.Is(err, provider.ErrPrecondition) || !strings.Contains(err.Error(), "idle for 5m0s (its cooldown period)") ||
		!strings.Contains(err.Error(), "--cooldown-period 1800") {
		t.Errorf("Warmup with idle 30m on a 5m pool: %v, want a precondition error naming the cooldown", err)
	}
	if ids := e.fake.identifiers(); len(ids) != 0 {
		t.Errorf("sessions left after the refused warmup: %v", ids)
	}
	v := e.warmup(t, "idle-ok", 5*time.Minute)
	if want := now.Add(5 * time.Minute); !v.ExpiresAt.Equal(want) {
		t.Errorf("lease expires %v, want %v", v.ExpiresAt, want)
	}
}

// A session the pool ended (its cooldown passed) is gone: Status and
// List do not find it, Stop succeeds, and nothing is made again.
func TestSessionEndedByCooldown(t *testing.T) {
	e := newEnv(t, 5*time.Minute)
	v := e.warmup(t, "cooled", 5*time.Minute)
	e.clock.Advance(5 * time.Minute)
	ctx := context.Background()
	if _, err := e.b.Status(ctx, provider.StatusRequest{ID: v.ID}); !errors.Is(err, provider.ErrNotFound) {
		t.Errorf("Status after the cooldown: %v, want ErrNotFound", err)
	}
	if all, err := e.b.List(ctx, provider.ListRequest{}); err != nil || len(all) != 0 {
		t.Errorf("List after the cooldown = %v, %v; want none", all, err)
	}
	if _, err := e.b.Run(ctx, provider.DelegatedRunRequest{LeaseID: v.ID, Command: []string{"true"}}); !errors.Is(err, provider.ErrNotFound) {
		t.Errorf("Run after the cooldown: %v, want ErrNotFound", err)
	}
	if err := e.b.Stop(ctx, provider.StopRequest{ID: v.ID}); err != nil {
		t.Errorf("Stop of an ended lease: %v", err)
	}
	if ids := e.fake.identifiers(); len(ids) != 0 {
		t.Errorf("sessions made by looking at an ended lease: %v", ids)
	}
}

// seenWriter records output and closes seen once it contains match.
type seenWriter struct {
	mu    sync.Mutex
	buf   bytes.Buffer
	match string
	seen  chan struct{}
}

func (w *seenWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	had := strings.Contains(w.buf.String(), w.match)
	w.buf.Write(p)
	if !had && strings.Contains(w.buf.String(), w.match) {
		close(w.seen)
	}
	return len(p), nil
}

// A command running when its session ends (deleted, or past the pool's
// cooldown) ends with an error saying so, never with an exit code, and
// the empty session the last poll made is deleted.
func TestRunWhenSessionEnds(t *testing.T) {
	e := newEnv(t, 5*time.Minute)
	v := e.warmup(t, "ending", 5*time.Minute)
	out := &seenWriter{match: "started", seen: make(chan struct{})}
	done := make(chan error, 1)
	go func() {
		res, err := e.b.Run(context.Background(), provider.DelegatedRunRequest{LeaseID: v.ID,
			Command: []string{"sh", "-c", "echo started; exec sleep 600"}, Stdout: out})
		if err == nil {
			err = errors.New("exit code " + string(rune('0'+res.ExitCode)))
		}
		done <- err
	}()
	select {
	case <-out.seen:
	case err := <-done:
		t.Fatalf("Run ended before the command started: %v", err)
	}
	e.fake.end(e.b.Identifier(v.ID)) // the pool ends the session
	err := <-done
	if err == nil || !strings.Contains(err.Error(), "the session ended while the command ran") {
		t.Errorf("Run whose session ended: %v, want an error saying so", err)
	}
	if ids := e.fake.identifiers(); len(ids) != 0 {
		t.Errorf("sessions left after the run: %v", ids)
	}
}
