package crabboxtest

import (
	"context"
	"fmt"
	"io"
	"os"
	"testing"

	"go.uber.org/goleak"

	"github.com/crabbox-dev/crabbox"
)

// Main is a whole TestMain: it leases and syncs one box for the test
// binary (as Box does for one test), sets *box to it, runs the tests,
// releases the box, and then, if the tests passed, fails the binary when
// they left goroutines running (as goleak.VerifyTestMain does; goroutines
// running before Main are ignored). It exits the process with the tests'
// status, so it is the last call of TestMain:
//
//	var box *crabbox.Lease
//
//	func TestMain(m *testing.M) { crabboxtest.Main(m, &box) }
//
// When the box cannot be leased or synced, no test runs: Main says why on
// stderr and exits with status 1.
func Main(m *testing.M, box **crabbox.Lease, opts ...Option) {
	os.Exit(runMain(m, box, os.Stderr, opts...))
}

// runMain is Main up to the exit, reporting on stderr.
func runMain(m interface{ Run() int }, box **crabbox.Lease, stderr io.Writer, opts ...Option) int {
	c := newConfig(opts)
	running := goleak.IgnoreCurrent()
	l, stop, err := Start(context.Background(), opts...)
	if err != nil {
		fmt.Fprintf(stderr, "crabboxtest: %v\n", err)
		return 1
	}
	*box = l
	code := m.Run()
	*box = nil
	if err := stop(); err != nil {
		fmt.Fprintf(stderr, "crabboxtest: %v\n", err)
		if code == 0 {
			code = 1
		}
	}
	if code == 0 {
		if err := goleak.Find(append([]goleak.Option{running}, c.leak...)...); err != nil {
			fmt.Fprintf(stderr, "crabboxtest: goroutines left running after the tests passed: %v\n", err)
			code = 1
		}
	}
	return code
}
