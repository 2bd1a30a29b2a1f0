package run_test

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/crabbox-dev/crabbox/internal/testsshd"
	"github.com/crabbox-dev/crabbox/run"
)

// StopAll ends the commands of one lease on a box that serves several: the
// lease's runs end with their commands' death by SIGTERM (143), the other
// lease's and untagged commands run on.
func TestStopAllEndsOnlyTheLeasesCommands(t *testing.T) {
	client := dial(t)
	type started struct {
		name string
		pgid string
		done <-chan runResult
	}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var runs []started
	for _, tt := range []struct{ name, lease string }{
		{"mine", "cbx_mine"}, {"mine too", "cbx_mine"}, {"another lease", "cbx_other"}, {"untagged", ""},
	} {
		r, w := io.Pipe()
		done := startRunContext(t, ctx, client, run.Command{Shell: "sleep 1000 & echo started $$; wait", Stdout: w, Lease: tt.lease}, w)
		pgid := testsshd.ReadStarted(t, r)
		go io.Copy(io.Discard, r)
		runs = append(runs, started{tt.name, pgid, done})
	}

	got, err := run.StopAll(t.Context(), client, "cbx_mine", 0)
	if err != nil {
		t.Fatalf("StopAll: %v", err)
	}
	if diff := cmp.Diff(run.StopResult{Stopped: 2}, got); diff != "" {
		t.Errorf("StopAll result (-want +got):\n%s", diff)
	}
	for _, r := range runs[:2] {
		res := <-r.done
		if res.err != nil || res.res.ExitCode != 143 || res.res.Signal != "TERM" {
			t.Errorf("run %q after StopAll: %+v, %v; want exit 143 (TERM)", r.name, res.res, res.err)
		}
		testsshd.AssertGroupGone(t, client, r.pgid)
	}
	for _, r := range runs[2:] {
		select {
		case res := <-r.done:
			t.Errorf("run %q ended when another lease was stopped: %+v, %v", r.name, res.res, res.err)
		default:
		}
		if left := testsshd.GroupMembers(t, client, r.pgid); len(left) == 0 {
			t.Errorf("run %q: its processes are gone after another lease was stopped", r.name)
		}
	}
	// Nothing of the lease is left to stop.
	if got, err := run.StopAll(t.Context(), client, "cbx_mine", 0); err != nil || got != (run.StopResult{}) {
		t.Errorf("StopAll again = %+v, %v; want nothing stopped", got, err)
	}
	cancel()
	for _, r := range runs[2:] {
		if res := <-r.done; !errors.Is(res.err, context.Canceled) {
			t.Errorf("run %q cancelled: %v", r.name, res.err)
		}
		testsshd.AssertGroupGone(t, client, r.pgid)
	}
}

func TestLeaseTagErrors(t *testing.T) {
	client := dial(t)
	for _, tag := range []string{"a b", "x;rm -rf /", "a\nb", "`id`", strings.Repeat("a", 129)} {
		if _, err := run.Run(t.Context(), client, run.Command{Shell: "true", Lease: tag}); err == nil {
			t.Errorf("Run with lease tag %q: no error", tag)
		}
		if _, err := run.StopAll(t.Context(), client, tag, 0); err == nil {
			t.Errorf("StopAll(%q): no error", tag)
		}
	}
	if _, err := run.StopAll(t.Context(), client, "", 0); err == nil {
		t.Error("StopAll with no tag: no error")
	}
}
