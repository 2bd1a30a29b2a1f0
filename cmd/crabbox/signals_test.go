package main

import (
	"bytes"
	"context"
	"strings"
	"syscall"
	"testing"

	"github.com/crabbox-dev/crabbox/cmd/internal/cli"
)

// Main exits 128+signal for any failure after a signal, with the failure on
// the interruption's line; a run that failed on its own before is 125.
func TestMainAfterSignal(t *testing.T) {
	for _, tt := range []struct {
		cause error
		code  int
		line  string
	}{
		{cli.InterruptedError{Sig: syscall.SIGTERM}, 143, "crabbox: interrupted (SIGTERM); "},
		{nil, 125, "crabbox: "},
	} {
		ctx, cancel := context.WithCancelCause(context.Background())
		if tt.cause != nil {
			cancel(tt.cause)
		}
		var stdout, stderr bytes.Buffer
		// An unknown lease fails without touching anything.
		code := Main(ctx, []string{"stop", "--provider", "nope", "x"}, nil, &stdout, &stderr)
		cancel(nil)
		if code != tt.code || !strings.HasPrefix(stderr.String(), tt.line) {
			t.Errorf("cause %v: exit %d, stderr %q; want %d and a line starting %q", tt.cause, code, stderr.String(), tt.code, tt.line)
		}
	}
}
