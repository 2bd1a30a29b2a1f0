package crabbox_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/crabbox-dev/crabbox"
	"github.com/crabbox-dev/crabbox/run"
)

// processGone reports whether process pid has ended: it is not in the
// process table, or only as a zombie waiting for its parent.
func processGone(t *testing.T, pid int) bool {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if os.IsNotExist(err) {
		return true
	}
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	fields := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	return len(fields) > 0 && fields[0] == "Z"
}

// startSleep runs `sleep 300` on l from a goroutine, as `crabbox run --id`
// does from another process, and returns its pid once it runs and the
// channel its result arrives on.
func startSleep(t *testing.T, l *crabbox.Lease) (int, <-chan error, <-chan run.Result) {
	t.Helper()
	pidFile := filepath.Join(t.TempDir(), "sleep.pid")
	w := &signalWriter{marker: "started", seen: make(chan struct{})}
	errc, resc := make(chan error, 1), make(chan run.Result, 1)
	go func() {
		res, err := l.Exec(context.Background(), run.Command{
			Shell: fmt.Sprintf("echo $$ >%s; echo started; exec sleep 300", run.Quote(pidFile)), Stdout: w,
		})
		resc <- res
		errc <- err
	}()
	select {
	case <-w.seen:
	case err := <-errc:
		t.Fatalf("sleep on %s ended before it started: %v", l.ID(), err)
	}
	b, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatalf("pid file: %v", err)
	}
	t.Cleanup(func() {
		// Should the test fail, its sleep does not outlive it.
		if p, err := os.FindProcess(pid); err == nil && !processGone(t, pid) {
			_ = p.Kill()
		}
	})
	return pid, errc, resc
}

// Releasing a handle while a command runs through it ends the command,
// and the run reports its death by SIGTERM before the connection closes.
func TestReleaseEndsItsOwnRunningCommand(t *testing.T) {
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		t.Skip("needs procfs to tell that a process ended")
	}
	c := newClient(t, t.TempDir())
	box, err := c.Acquire(context.Background(), crabbox.AcquireOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pid, errc, resc := startSleep(t, box)
	if err := box.Release(context.Background()); err != nil {
		t.Fatalf("Release: %v", err)
	}
	if !processGone(t, pid) {
		t.Errorf("the lease's command (pid %d) still runs after Release", pid)
	}
	if res, err := <-resc, <-errc; err != nil || res.ExitCode != 143 || res.Signal != "TERM" {
		t.Errorf("the released command's run: %+v, %v; want exit 143 (TERM)", res, err)
	}
	noLeases(t, c)
}

// Stopping a lease (Client.Stop, or Release of its handle) ends the
// commands running on it, started by another client as another process
// would, before the box goes: the command is gone when the call returns,
// and its run reports its death by SIGTERM. Another lease's command on
// the same machine runs on.
func TestStopEndsTheLeasesCommands(t *testing.T) {
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		t.Skip("needs procfs to tell that a process ended")
	}
	for _, tt := range []struct {
		name string
		stop func(*crabbox.Client, *crabbox.Lease) error
	}{
		{"Client.Stop", func(c *crabbox.Client, l *crabbox.Lease) error { return c.Stop(context.Background(), l.ID()) }},
		{"Lease.Release", func(_ *crabbox.Client, l *crabbox.Lease) error { return l.Release(context.Background()) }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			state := t.TempDir()
			owner := newClient(t, state)
			ctx := context.Background()
			box, err := owner.Acquire(ctx, crabbox.AcquireOptions{Keep: true})
			if err != nil {
				t.Fatal(err)
			}
			defer box.Close()
			neighbour, err := owner.Acquire(ctx, crabbox.AcquireOptions{Keep: true})
			if err != nil {
				t.Fatal(err)
			}
			defer neighbour.Release(ctx)

			// Another client over the same state directory, as another process would be.
			user := newClient(t, state)
			held, err := user.Resolve(ctx, box.ID())
			if err != nil {
				t.Fatal(err)
			}
			defer held.Close()
			pid, errc, resc := startSleep(t, held)
			otherPID, otherErr, _ := startSleep(t, neighbour)

			if err := tt.stop(owner, box); err != nil {
				t.Fatalf("stop: %v", err)
			}
			if !processGone(t, pid) {
				t.Errorf("the lease's command (pid %d) still runs after the lease was stopped", pid)
			}
			// The run is another client's: it learns of its command's
			// end (143) unless the box went before the news reached it
			// (an error); either way it returns.
			if res, err := <-resc, <-errc; err == nil && res.ExitCode != 143 {
				t.Errorf("the stopped command's run: exit %d, want 143", res.ExitCode)
			}
			if processGone(t, otherPID) {
				t.Errorf("another lease's command (pid %d) ended when this lease was stopped", otherPID)
			}
			select {
			case err := <-otherErr:
				t.Errorf("another lease's run ended: %v", err)
			default:
			}
			if err := neighbour.Release(ctx); err != nil {
				t.Fatal(err)
			}
			if err := <-otherErr; err != nil {
				t.Errorf("another lease's run, released: %v", err)
			}
			if !processGone(t, otherPID) {
				t.Errorf("another lease's command (pid %d) still runs after its lease was released", otherPID)
			}
		})
	}
}
