package cli

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/jonboulle/clockwork"
)

// recorder is an interrupter whose cancel and exit are recorded.
type recorder struct {
	h      *interrupter
	clock  *clockwork.FakeClock
	ctx    context.Context
	exits  []os.Signal
	cancel int
}

func newRecorder(t *testing.T) *recorder {
	t.Helper()
	r := &recorder{clock: clockwork.NewFakeClock()}
	ctx, cancel := context.WithCancelCause(context.Background())
	t.Cleanup(func() { cancel(nil) })
	r.ctx = ctx
	r.h = &interrupter{
		clock: r.clock, window: interruptWindow,
		cancel: func(err error) { r.cancel++; cancel(err) },
		exit:   func(sig os.Signal) { r.exits = append(r.exits, sig) },
	}
	return r
}

func TestInterrupterFirstSignalCancels(t *testing.T) {
	for _, tt := range []struct {
		sig  os.Signal
		code int
		name string
	}{
		{syscall.SIGINT, 130, "SIGINT"},
		{syscall.SIGTERM, 143, "SIGTERM"},
		{syscall.SIGHUP, 129, "SIGHUP"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := newRecorder(t)
			r.h.handle(tt.sig)
			if !errors.Is(r.ctx.Err(), context.Canceled) {
				t.Fatalf("ctx.Err() = %v after %s, want context.Canceled", r.ctx.Err(), tt.name)
			}
			sig, ok := InterruptedBy(r.ctx)
			if !ok || sig != tt.sig {
				t.Fatalf("interruptedBy = %v, %v; want %v", sig, ok, tt.sig)
			}
			if !errors.Is(context.Cause(r.ctx), context.Canceled) {
				t.Errorf("cause %v does not match context.Canceled", context.Cause(r.ctx))
			}
			if got := SignalExitCode(sig); got != tt.code {
				t.Errorf("exit code for %s = %d, want %d", tt.name, got, tt.code)
			}
			if got := SignalName(sig); got != tt.name {
				t.Errorf("signalName = %q, want %q", got, tt.name)
			}
			if len(r.exits) != 0 {
				t.Errorf("exit called after one signal: %v", r.exits)
			}
		})
	}
}

// Signals within the window of the first are one interruption (GNU timeout
// signals the process and its group); one after it exits at once, with the
// code of the signal that forced the exit.
func TestInterrupterCoalescesABurst(t *testing.T) {
	r := newRecorder(t)
	r.h.handle(syscall.SIGTERM)
	r.h.handle(syscall.SIGTERM)
	r.clock.Advance(interruptWindow / 2)
	r.h.handle(syscall.SIGINT)
	r.clock.Advance(interruptWindow/2 - time.Nanosecond)
	r.h.handle(syscall.SIGTERM)
	if r.cancel != 1 || len(r.exits) != 0 {
		t.Fatalf("within the window: %d cancels, exits %v; want 1 cancel and no exit", r.cancel, r.exits)
	}
	if sig, _ := InterruptedBy(r.ctx); sig != syscall.SIGTERM {
		t.Errorf("interrupted by %v, want the first signal, SIGTERM", sig)
	}
	r.clock.Advance(time.Nanosecond)
	r.h.handle(syscall.SIGINT)
	if diff := cmp.Diff([]os.Signal{syscall.SIGINT}, r.exits); diff != "" {
		t.Errorf("exits after the window (-want +got):\n%s", diff)
	}
}

// watch handles every signal sent until the channel closes.
func TestInterrupterWatch(t *testing.T) {
	r := newRecorder(t)
	ch := make(chan os.Signal, 3)
	ch <- syscall.SIGHUP
	ch <- syscall.SIGHUP
	close(ch)
	r.h.watch(ch)
	if sig, ok := InterruptedBy(r.ctx); !ok || sig != syscall.SIGHUP || r.cancel != 1 || len(r.exits) != 0 {
		t.Errorf("after two SIGHUPs at once: interrupted by %v (%v), %d cancels, exits %v; want SIGHUP, 1, none", sig, ok, r.cancel, r.exits)
	}
}

// A signal the process was started with ignored (nohup, a background job)
// stays ignored.
func TestNotifySignalsSkipsIgnored(t *testing.T) {
	all := notifySignals(func(os.Signal) bool { return false })
	if diff := cmp.Diff(terminationSignals, all); diff != "" {
		t.Errorf("nothing ignored (-want +got):\n%s", diff)
	}
	got := notifySignals(func(sig os.Signal) bool { return sig == terminationSignals[0] })
	if diff := cmp.Diff(terminationSignals[1:], got); diff != "" {
		t.Errorf("first ignored (-want +got):\n%s", diff)
	}
}

// An interruption is reported by the signal that caused it: one line and
// 128+n; a context cancelled without a signal is still 130. A failure
// besides the cancellation (the release failed) is on the same line.
func TestInterruptedExitCode(t *testing.T) {
	cancelled := fmt.Errorf("run: %w", context.Canceled)
	released := errors.New("release lease cbx_000000000000: box unreachable")
	for _, tt := range []struct {
		cause, err error
		code       int
		line       string
	}{
		{InterruptedError{syscall.SIGTERM}, cancelled, 143, "crabbox: interrupted (SIGTERM)\n"},
		{InterruptedError{syscall.SIGHUP}, cancelled, 129, "crabbox: interrupted (SIGHUP)\n"},
		{InterruptedError{syscall.SIGINT}, context.Canceled, 130, "crabbox: interrupted (SIGINT)\n"},
		{nil, cancelled, 130, "crabbox: interrupted\n"},
		{InterruptedError{syscall.SIGTERM}, errors.New("sync: connection lost"), 143, "crabbox: interrupted (SIGTERM); sync: connection lost\n"},
		{InterruptedError{syscall.SIGTERM}, errors.Join(cancelled, released), 143,
			"crabbox: interrupted (SIGTERM); release lease cbx_000000000000: box unreachable\n"},
		{InterruptedError{syscall.SIGTERM}, errors.Join(errors.Join(cancelled, nil), fmt.Errorf("close:\n%w", released)), 143,
			"crabbox: interrupted (SIGTERM); close:; release lease cbx_000000000000: box unreachable\n"},
	} {
		ctx, cancel := context.WithCancelCause(context.Background())
		cancel(tt.cause)
		var stderr bytes.Buffer
		if code := Interrupted(ctx, "crabbox", tt.err, &stderr); code != tt.code || stderr.String() != tt.line {
			t.Errorf("cause %v, err %v: exit %d, stderr %q; want %d, %q", tt.cause, tt.err, code, stderr.String(), tt.code, tt.line)
		}
	}
}
