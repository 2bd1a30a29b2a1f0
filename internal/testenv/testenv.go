// Package testenv lets tests that need something a machine may lack (a
// docker engine, a PostgreSQL server, sshd) skip through a Group, and a
// package's TestMain say in one line per group how many skipped, why, and
// what enables them:
//
//	crabbox: 8 docker engine tests skipped: no busybox (busybox-static) for the test box image; to run them: bash .ci/setup.d/10-docker.sh, as root
//
// `go test` shows a passing package's output only with -v or -json, so
// the README's test command pipes `go test -json` through
// ./internal/cmd/testsummary, which prints these lines with the usual
// ok/FAIL lines. Only tests import this package.
package testenv

import (
	"fmt"
	"io"
	"os"
	"sync"
	"testing"

	"go.uber.org/goleak"
)

// SummaryPrefix starts every summary line.
const SummaryPrefix = "crabbox: "

// Group is a set of tests with one need.
type Group struct {
	// Name names the tests, e.g. "docker engine" or "PostgreSQL store".
	Name string
	// Enable says what makes them run, e.g. "bash .ci/setup.d/10-docker.sh".
	Enable string

	mu      sync.Mutex
	skipped int
	reason  string
}

// Skip skips t for reason, or fails it when CI=true (CI must run every
// group), and counts the skip.
func (g *Group) Skip(t testing.TB, reason string) {
	t.Helper()
	if os.Getenv("CI") == "true" {
		t.Fatalf("CI=true, and the %s tests cannot run: %s (%s)", g.Name, reason, g.Enable)
	}
	g.mu.Lock()
	g.skipped++
	if g.reason == "" {
		g.reason = reason
	}
	g.mu.Unlock()
	t.Skipf("%s tests skipped: %s (%s)", g.Name, reason, g.Enable)
}

// Report writes the group's summary line to w when some of its tests
// skipped.
func (g *Group) Report(w io.Writer) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.skipped == 0 {
		return
	}
	noun := "tests"
	if g.skipped == 1 {
		noun = "test"
	}
	fmt.Fprintf(w, "%s%d %s %s skipped: %s; to run them: %s\n", SummaryPrefix, g.skipped, g.Name, noun, g.reason, g.Enable)
}

// Main runs the tests, writes the groups' summary lines to stderr, checks
// for leaked goroutines when they passed (as goleak.VerifyTestMain), and
// exits. before, when not nil, runs after the tests and before the leak
// check (a fixture's teardown); its error fails the run.
func Main(m *testing.M, before func() error, groups ...*Group) {
	code := m.Run()
	if before != nil {
		if err := before(); err != nil {
			fmt.Fprintln(os.Stderr, "teardown:", err)
			code = 1
		}
	}
	for _, g := range groups {
		g.Report(os.Stderr)
	}
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}
