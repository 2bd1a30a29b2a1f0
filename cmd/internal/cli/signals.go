package cli

import (
	"context"
	"errors"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/jonboulle/clockwork"
)

// interruptWindow is how long after the first signal further signals count
// as the same interruption. GNU timeout signals both crabbox and its process
// group, and a terminal's Ctrl-C or a container stop may reach it through
// more than one path, so one interruption often arrives as several signals
// within milliseconds; only a signal sent later is a deliberate second one.
const interruptWindow = time.Second

// InterruptedError is the cause of a context cancelled by a signal. It
// matches context.Canceled, as the context's own error does.
type InterruptedError struct{ Sig os.Signal }

func (e InterruptedError) Error() string { return "interrupted (" + SignalName(e.Sig) + ")" }

func (e InterruptedError) Unwrap() error { return context.Canceled }

// interrupter turns termination signals into a cancelled context. The first
// signal cancels the context, with an interruptedError naming the signal as
// its cause, so that the run ends cleanly: the remote process group is
// ended, a one-shot lease released and an acquire rolled back. Signals that
// come within window of the first are the same interruption. One that comes
// later asks to leave at once: exit is called with it.
//
// handle is called from one goroutine (watch); it is not safe for
// concurrent use.
type interrupter struct {
	clock  clockwork.Clock
	window time.Duration
	cancel context.CancelCauseFunc
	exit   func(sig os.Signal)

	first time.Time // when the first signal came; zero before it
}

// handle acts on one signal.
func (h *interrupter) handle(sig os.Signal) {
	now := h.clock.Now()
	switch {
	case h.first.IsZero():
		h.first = now
		h.cancel(InterruptedError{sig})
	case now.Sub(h.first) < h.window:
		// The first signal delivered again: already being handled.
	default:
		h.exit(sig)
	}
}

// watch handles the signals from sigs until it is closed.
func (h *interrupter) watch(sigs <-chan os.Signal) {
	for sig := range sigs {
		h.handle(sig)
	}
}

// notifySignals returns which of the termination signals to listen for:
// those the process does not ignore. A program started with a signal
// ignored (nohup ignores SIGHUP, a shell's background job SIGINT) was asked
// to survive it, so crabbox keeps it ignored rather than acting on it.
func notifySignals(ignored func(os.Signal) bool) []os.Signal {
	var sigs []os.Signal
	for _, sig := range terminationSignals {
		if !ignored(sig) {
			sigs = append(sigs, sig)
		}
	}
	return sigs
}

// HandleSignals makes the termination signals cancel the context that
// cancel ends, and a deliberate second signal end the process at once,
// saying so on stderr as the program called name.
func HandleSignals(name string, cancel context.CancelCauseFunc) {
	sigs := notifySignals(signal.Ignored)
	if len(sigs) == 0 {
		return
	}
	ch := make(chan os.Signal, 8) // room for a burst: signal.Notify drops what does not fit
	signal.Notify(ch, sigs...)
	h := &interrupter{
		clock: clockwork.NewRealClock(), window: interruptWindow, cancel: cancel,
		exit: func(sig os.Signal) {
			os.Stderr.WriteString(name + ": interrupted again (" + SignalName(sig) + "), exiting at once\n")
			os.Exit(SignalExitCode(sig))
		},
	}
	go h.watch(ch)
}

// InterruptedBy returns the signal that cancelled ctx, if one did.
func InterruptedBy(ctx context.Context) (os.Signal, bool) {
	var ie InterruptedError
	if errors.As(context.Cause(ctx), &ie) {
		return ie.Sig, true
	}
	return nil, false
}

// Signalled reports whether a signal cancelled ctx.
func Signalled(ctx context.Context) bool {
	_, ok := InterruptedBy(ctx)
	return ok
}

// SignalExitCode is the exit status for a process ended by sig: 128 plus
// its number, as shells report it (SIGINT 130, SIGTERM 143, SIGHUP 129).
func SignalExitCode(sig os.Signal) int {
	if s, ok := sig.(syscall.Signal); ok && s > 0 && s < 128 {
		return 128 + int(s)
	}
	return ExitInterrupted
}

// SignalName is the conventional name of sig ("SIGTERM").
func SignalName(sig os.Signal) string {
	switch sig {
	case syscall.SIGINT:
		return "SIGINT"
	case syscall.SIGTERM:
		return "SIGTERM"
	case syscall.SIGHUP:
		return "SIGHUP"
	}
	return sig.String()
}
