package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/crabbox-dev/crabbox/coordinator"
	"github.com/crabbox-dev/crabbox/coordinator/api"
	"github.com/crabbox-dev/crabbox/coordinator/auth"
	coordclient "github.com/crabbox-dev/crabbox/coordinator/client"
	"github.com/crabbox-dev/crabbox/coordinator/store/sqlite"
)

const runsToken = "runs-test-token-0123456789"

// runsCoordinator serves a coordinator in this process (its runs need no
// provider) and returns the environment that points the CLI at it and a
// client of it, both as owner alice.
func runsCoordinator(t *testing.T) ([]string, *coordclient.Client) {
	t.Helper()
	st, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "coordinator.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	srv, err := coordinator.New(coordinator.Config{
		Store:  st,
		Tokens: auth.Config{SharedToken: runsToken, SharedOwner: "alice", DefaultOrg: "acme"},
	})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewUnstartedServer(srv)
	hs.Config.RegisterOnShutdown(srv.CloseControl)
	hs.Start()
	t.Cleanup(func() {
		srv.CloseControl()
		hs.Close()
	})
	cl, err := coordclient.New(hs.URL, runsToken)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.CloseIdleConnections)
	env := append(stateEnv(t), "CRABBOX_COORDINATOR="+hs.URL, "CRABBOX_COORDINATOR_TOKEN="+runsToken)
	return env, cl
}

// recordedRun creates a run with events at the coordinator.
func recordedRun(t *testing.T, cl *coordclient.Client, evs ...api.EventRequest) string {
	t.Helper()
	run, err := cl.CreateRun(t.Context(), api.RunRequest{Provider: "local", Command: []string{"make", "test"}})
	if err != nil {
		t.Fatal(err)
	}
	appendRunEvents(t, cl, run.ID, evs...)
	return run.ID
}

func appendRunEvents(t *testing.T, cl *coordclient.Client, runID string, evs ...api.EventRequest) {
	t.Helper()
	for _, ev := range evs {
		if _, err := cl.AppendEvent(t.Context(), runID, ev); err != nil {
			t.Fatal(err)
		}
	}
}

func out(stream, text string) api.EventRequest {
	return api.EventRequest{Type: api.EventOutput, Phase: api.PhaseCommand, Stream: stream, Message: text}
}

func TestAttachPrintsAFinishedRun(t *testing.T) {
	t.Parallel()
	env, cl := runsCoordinator(t)
	runID := recordedRun(t, cl,
		api.EventRequest{Type: api.EventPhase, Phase: api.PhaseSync, Message: "syncing"},
		out("stdout", "hello\n"), out("stderr", "warn\n"),
		api.EventRequest{Type: "stdout", Stream: "stdout", Data: "upstream says hi\n"}, // an upstream client's output event
		api.EventRequest{Type: api.EventCommand, Phase: api.PhaseCommand, Message: "exit 3"})
	if _, err := cl.FinishRun(t.Context(), runID, api.FinishRequest{ExitCode: 3}); err != nil {
		t.Fatal(err)
	}
	r := crabboxCmd(t, env, "", "attach", runID)
	if r.code != 3 || r.stdout != "hello\nupstream says hi\n" {
		t.Fatalf("attach: exit %d, stdout %q, stderr %q; want 3 and the run's stdout", r.code, r.stdout, r.stderr)
	}
	lines := strings.Split(strings.TrimSpace(r.stderr), "\n")
	if len(lines) != 3 || !strings.HasPrefix(lines[0], "0001 phase") || !strings.HasSuffix(lines[0], " syncing") ||
		lines[1] != "warn" || !strings.HasPrefix(lines[2], "0005 command") || !strings.HasSuffix(lines[2], " exit 3") {
		t.Errorf("attach stderr:\n%s", r.stderr)
	}
	// --after skips what was seen; --id is the argument.
	r = crabboxCmd(t, env, "", "attach", "--id", runID, "--after", "3")
	if r.code != 3 || r.stdout != "upstream says hi\n" {
		t.Errorf("attach --after 3: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
}

// attach follows a run that is still going: the events recorded while it
// runs are printed, once each, and it exits with the run's code.
func TestAttachFollowsARunningRun(t *testing.T) {
	t.Parallel()
	env, cl := runsCoordinator(t)
	runID := recordedRun(t, cl, out("stdout", "one\n"))
	cmd := exec.Command(os.Args[0], "attach", runID, "--poll", "20ms")
	cmd.Env = append(os.Environ(), append([]string{"CRABBOX_TEST_MAIN=1", "GORACE=atexit_sleep_ms=0"}, env...)...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	// attach printed the first line: it follows; the rest comes live.
	first := make([]byte, len("one\n"))
	if _, err := io.ReadFull(stdout, first); err != nil || string(first) != "one\n" {
		t.Fatalf("first output %q, %v (stderr %s)", first, err, stderr.String())
	}
	appendRunEvents(t, cl, runID, out("stdout", "two\n"), out("stdout", "three\n"))
	if _, err := cl.FinishRun(t.Context(), runID, api.FinishRequest{ExitCode: 0}); err != nil {
		t.Fatal(err)
	}
	rest, err := io.ReadAll(stdout)
	if err != nil {
		t.Fatal(err)
	}
	err = cmd.Wait()
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		t.Fatal(err)
	}
	if code := cmd.ProcessState.ExitCode(); code != 0 || string(rest) != "two\nthree\n" {
		t.Errorf("attach: exit %d, then stdout %q, stderr %q", code, rest, stderr.String())
	}
}

func TestEvents(t *testing.T) {
	t.Parallel()
	env, cl := runsCoordinator(t)
	runID := recordedRun(t, cl, out("stdout", "a\nb\n"), api.EventRequest{Type: api.EventLease, Phase: api.PhaseRelease, Message: "lease released"})
	r := crabboxCmd(t, env, "", "events", runID)
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	if r.code != 0 || len(lines) != 2 || !strings.HasPrefix(lines[0], "0001 output") || !strings.Contains(lines[0], "stream=stdout") ||
		!strings.HasSuffix(lines[0], ` a\nb`) || !strings.HasSuffix(lines[1], " lease released") {
		t.Fatalf("events: exit %d, stdout:\n%s\nstderr %q", r.code, r.stdout, r.stderr)
	}
	r = crabboxCmd(t, env, "", "events", runID, "--after", "1", "--json")
	var evs []api.Event
	if err := json.Unmarshal([]byte(r.stdout), &evs); r.code != 0 || err != nil || len(evs) != 1 || evs[0].Seq != 2 {
		t.Fatalf("events --json --after 1: exit %d, %v, stdout %s", r.code, err, r.stdout)
	}
	if _, err := cl.FinishRun(t.Context(), runID, api.FinishRequest{ExitCode: 1}); err != nil {
		t.Fatal(err)
	}
	// --follow on a finished run prints what is left and ends (exit 0:
	// events reports events, not the run's code).
	r = crabboxCmd(t, env, "", "events", runID, "--follow", "--json")
	var seqs []int64
	for line := range strings.SplitSeq(strings.TrimSpace(r.stdout), "\n") {
		var ev api.Event
		if err := json.Unmarshal([]byte(line), &ev); err != nil {
			t.Fatalf("events --follow --json line %q: %v", line, err)
		}
		seqs = append(seqs, ev.Seq)
	}
	if r.code != 0 || !cmp.Equal(seqs, []int64{1, 2}) {
		t.Errorf("events --follow: exit %d, seqs %v, stderr %q", r.code, seqs, r.stderr)
	}
}

func TestEventsAndAttachUsage(t *testing.T) {
	t.Parallel()
	env := stateEnv(t)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"attach"}, "want a run ID"},
		{[]string{"attach", "cbx_0123456789ab"}, "is not a run ID"},
		{[]string{"attach", "run_0123456789ab", "--after", "-1"}, "--after -1"},
		{[]string{"attach", "run_0123456789ab", "--poll", "0s"}, "--poll 0s"},
		{[]string{"attach", "run_0123456789ab", "--id", "run_ffffffffffff"}, "differ"},
		{[]string{"events", "run_0123456789ab", "--limit", "0"}, "--limit 0"},
	} {
		r := crabboxCmd(t, env, "", tc.args...)
		if r.code != exitUsage || !strings.Contains(r.stderr, tc.want) {
			t.Errorf("crabbox %v: exit %d, stderr %q; want %d and %q", tc.args, r.code, r.stderr, exitUsage, tc.want)
		}
	}
	// Without a coordinator: a clear error, before anything.
	r := crabboxCmd(t, env, "", "attach", "run_0123456789ab")
	if r.code != exitFailure || !strings.Contains(r.stderr, "no coordinator") {
		t.Errorf("attach without a coordinator: exit %d, stderr %q", r.code, r.stderr)
	}
}
