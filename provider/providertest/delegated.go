package providertest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/crabbox-dev/crabbox/lease"
	"github.com/crabbox-dev/crabbox/provider"
)

// DelegatedHarness tells the delegated suite how to make a fresh backend
// for one subtest and what the backend can do. A backend whose sandboxes
// are a local fake of the provider's HTTP API starts that fake in
// NewBackend (t.Cleanup stops it) and names its goroutines in
// IgnoreGoroutines.
//
// Commands run by the suite need a POSIX shell (sh, echo, printf, cat,
// test, sleep, kill) in the sandbox.
type DelegatedHarness struct {
	NewBackend func(t *testing.T) provider.DelegatedRunBackend
	// Timeout bounds each subtest; default one minute.
	Timeout time.Duration
	// Signals says the backend reports a command ended by signal N as
	// 128+N (a shell that kills itself with SIGTERM exits 143).
	Signals bool
	// ProcessTable says the sandbox has /proc, so the suite can tell a
	// process that was killed from one still running; without it the
	// cancellation subtest checks only that Run returned ctx's error.
	ProcessTable bool
	// Reopen returns a fresh backend configured like closed that reaches
	// the same sandboxes, as a later process would; the close subtest
	// stops its lease through it. Nil means through the closed backend.
	Reopen func(t *testing.T, closed provider.DelegatedRunBackend) provider.DelegatedRunBackend
	// IgnoreGoroutines are goleak options for goroutines NewBackend starts
	// that are not the backend's (a fake API server).
	IgnoreGoroutines []goleak.Option
}

// RunDelegated runs the delegated conformance suite: lease lifecycle
// (warmup, list, status, stop), exact exit codes and signals, separate
// streamed stdout and stderr, env and directory, cancellation and timeouts
// ending the remote command, files (when the backend implements
// provider.DelegatedFileBackend, which its spec must then declare with
// provider.FeatureFiles), touch (provider.DelegatedTouchBackend), no lease
// left by a warmup that fails, and nothing running after Close.
func RunDelegated(t *testing.T, h DelegatedHarness) {
	if h.Timeout == 0 {
		h.Timeout = time.Minute
	}
	run := func(name string, fn func(t *testing.T, ctx context.Context, h DelegatedHarness, b provider.DelegatedRunBackend)) {
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), h.Timeout)
			defer cancel()
			fn(t, ctx, h, h.NewBackend(t))
		})
	}
	run("Lifecycle", testDelegatedLifecycle)
	run("ExitCodes", testExitCodes)
	run("Output", testOutput)
	run("EnvAndDir", testEnvAndDir)
	run("Cancel", testCancel)
	run("Timeout", testTimeout)
	run("Files", testFiles)
	run("Touch", testTouch)
	run("NoLeakOnWarmupFailure", testWarmupNoLeak)
	t.Run("CloseLeavesNothingRunning", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), h.Timeout)
		defer cancel()
		testDelegatedClose(t, ctx, h)
	})
}

func warmupRequest(slug string) provider.WarmupRequest {
	now := time.Now().UTC().Truncate(time.Second)
	return provider.WarmupRequest{
		LeaseID: lease.NewID(), Slug: slug, TTL: lease.DefaultTTL, IdleTimeout: lease.DefaultIdleTimeout,
		ExpiresAt: lease.ExpiresAt(now, now, lease.DefaultTTL, lease.DefaultIdleTimeout),
		Labels:    map[string]string{"suite": "conformance"},
	}
}

// warm makes a lease that the test stops when it ends.
func warm(t *testing.T, ctx context.Context, b provider.DelegatedRunBackend, slug string) (provider.WarmupRequest, provider.LeaseView) {
	t.Helper()
	req := warmupRequest(slug)
	view, err := b.Warmup(ctx, req)
	if err != nil {
		t.Fatalf("Warmup: %v", err)
	}
	t.Cleanup(func() { _ = b.Stop(context.Background(), provider.StopRequest{ID: req.LeaseID}) })
	return req, view
}

func testDelegatedLifecycle(t *testing.T, ctx context.Context, _ DelegatedHarness, b provider.DelegatedRunBackend) {
	spec := b.Spec()
	if spec.Kind != provider.KindDelegatedRun {
		t.Errorf("spec kind = %q, want %q", spec.Kind, provider.KindDelegatedRun)
	}
	_, files := b.(provider.DelegatedFileBackend)
	if files != spec.Has(provider.FeatureFiles) {
		t.Errorf("backend implements provider.DelegatedFileBackend: %v, but spec declares %s: %v", files, provider.FeatureFiles, spec.Has(provider.FeatureFiles))
	}
	req, view := warm(t, ctx, b, "conformance-crab")
	if view.ID != req.LeaseID || view.Slug != req.Slug || view.Provider != spec.Name {
		t.Errorf("Warmup identity = (%q, %q, %q), want (%q, %q, %q)", view.ID, view.Slug, view.Provider, req.LeaseID, req.Slug, spec.Name)
	}
	if view.WorkRoot != "" && !strings.HasPrefix(view.WorkRoot, "/") {
		t.Errorf("Warmup WorkRoot = %q, want an absolute slash-separated path", view.WorkRoot)
	}
	st, err := b.Status(ctx, provider.StatusRequest{ID: req.LeaseID})
	if err != nil {
		t.Fatalf("Status: %v", err)
	}
	if st.ID != req.LeaseID || st.Slug != req.Slug {
		t.Errorf("Status identity = (%q, %q), want (%q, %q)", st.ID, st.Slug, req.LeaseID, req.Slug)
	}
	listed := findView(t, ctx, b, req.LeaseID)
	if listed == nil {
		t.Fatalf("List does not show lease %s", req.LeaseID)
	}
	if got := listed.Labels["suite"]; got != "conformance" || listed.Slug != req.Slug {
		t.Errorf("List shows lease %s with slug %q, labels %v; want slug %q, suite=conformance", req.LeaseID, listed.Slug, listed.Labels, req.Slug)
	}

	if err := b.Stop(ctx, provider.StopRequest{ID: req.LeaseID}); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	if findView(t, ctx, b, req.LeaseID) != nil {
		t.Errorf("List still shows lease %s after Stop", req.LeaseID)
	}
	if _, err := b.Status(ctx, provider.StatusRequest{ID: req.LeaseID}); !errors.Is(err, provider.ErrNotFound) {
		t.Errorf("Status after Stop: err = %v, want one matching provider.ErrNotFound", err)
	}
	if err := b.Stop(ctx, provider.StopRequest{ID: req.LeaseID}); err != nil {
		t.Errorf("second Stop: %v, want nil (stop is idempotent)", err)
	}
	if _, err := b.Status(ctx, provider.StatusRequest{ID: lease.NewID()}); !errors.Is(err, provider.ErrNotFound) {
		t.Errorf("Status of an unknown lease: err = %v, want one matching provider.ErrNotFound", err)
	}
}

func findView(t *testing.T, ctx context.Context, b provider.DelegatedRunBackend, id string) *provider.LeaseView {
	t.Helper()
	all, err := b.List(ctx, provider.ListRequest{})
	if err != nil {
		t.Fatalf("List: %v", err)
	}
	for i := range all {
		if all[i].ID == id {
			return &all[i]
		}
	}
	return nil
}

// sandboxDir is a directory in the lease's sandbox to run in: under its
// WorkRoot or, when the backend does not say, under the sandbox's home.
// Backends without files have no directory to choose: "" (their copy of
// the checkout).
func sandboxDir(t *testing.T, ctx context.Context, b provider.DelegatedRunBackend, view provider.LeaseView) string {
	t.Helper()
	if _, ok := b.(provider.DelegatedFileBackend); !ok {
		return ""
	}
	root := view.WorkRoot
	if root == "" {
		out, _ := runOK(t, ctx, b, provider.DelegatedRunRequest{LeaseID: view.ID, Command: []string{"sh", "-c", `cd && pwd`}})
		root = strings.TrimSpace(out) + "/crabbox"
	}
	return root + "/conformance"
}

// request is a run request for command in the lease's sandbox: in dir when
// the backend has files, else in a copy of an empty checkout.
func request(t *testing.T, lease, dir string, command ...string) provider.DelegatedRunRequest {
	req := provider.DelegatedRunRequest{LeaseID: lease, Command: command, Dir: dir}
	if dir == "" {
		req.Root, req.Workdir = t.TempDir(), "."
	}
	return req
}

// runOK runs req, fails the test on an error, and returns its output and
// exit code.
func runOK(t *testing.T, ctx context.Context, b provider.DelegatedRunBackend, req provider.DelegatedRunRequest) (string, int) {
	t.Helper()
	var out, errOut bytes.Buffer
	req.Stdout, req.Stderr = &out, &errOut
	res, err := b.Run(ctx, req)
	if err != nil {
		t.Fatalf("Run %q: %v (stderr %q)", req.Command, err, errOut.String())
	}
	return out.String(), res.ExitCode
}

// RunOutcome is what a command run on a delegated backend should produce.
type RunOutcome struct {
	ExitCode       int
	Stdout, Stderr string
}

// CheckRun runs req on b (its Stdout and Stderr are replaced) and reports
// through tb where the outcome differs from want.
func CheckRun(tb testing.TB, ctx context.Context, b provider.DelegatedRunBackend, req provider.DelegatedRunRequest, want RunOutcome) {
	tb.Helper()
	var out, errOut bytes.Buffer
	req.Stdout, req.Stderr = &out, &errOut
	res, err := b.Run(ctx, req)
	if err != nil {
		tb.Errorf("Run %q: %v", req.Command, err)
		return
	}
	got := RunOutcome{ExitCode: res.ExitCode, Stdout: out.String(), Stderr: errOut.String()}
	if got != want {
		tb.Errorf("Run %q: exit code %d, want %d; stdout %q, want %q; stderr %q, want %q",
			req.Command, got.ExitCode, want.ExitCode, got.Stdout, want.Stdout, got.Stderr, want.Stderr)
	}
}

func testExitCodes(t *testing.T, ctx context.Context, h DelegatedHarness, b provider.DelegatedRunBackend) {
	req, view := warm(t, ctx, b, "conformance-exit")
	dir := sandboxDir(t, ctx, b, view)
	cases := map[string]int{"exit 0": 0, "exit 1": 1, "exit 7": 7}
	if h.Signals {
		cases["kill -TERM $$"] = 128 + 15
		cases["kill -KILL $$"] = 128 + 9
	}
	for script, want := range cases {
		CheckRun(t, ctx, b, request(t, req.LeaseID, dir, "sh", "-c", script), RunOutcome{ExitCode: want})
	}
}

func testOutput(t *testing.T, ctx context.Context, _ DelegatedHarness, b provider.DelegatedRunBackend) {
	req, view := warm(t, ctx, b, "conformance-output")
	r := request(t, req.LeaseID, sandboxDir(t, ctx, b, view), "sh", "-c", `echo out1; echo err1 >&2; echo out2; printf 'err2' >&2; exit 3`)
	CheckRun(t, ctx, b, r, RunOutcome{ExitCode: 3, Stdout: "out1\nout2\n", Stderr: "err1\nerr2"})
}

func testEnvAndDir(t *testing.T, ctx context.Context, _ DelegatedHarness, b provider.DelegatedRunBackend) {
	req, view := warm(t, ctx, b, "conformance-env")
	dir := sandboxDir(t, ctx, b, view)
	r := request(t, req.LeaseID, dir, "sh", "-c", `printf '%s|%s' "$CRABBOX_SUITE" "$CRABBOX_SPACE"; echo here > probe`)
	r.Env = map[string]string{"CRABBOX_SUITE": "conformance", "CRABBOX_SPACE": "a b 'c'"}
	if dir == "" { // the backend copies the checkout: run in a subdirectory of it
		if err := os.MkdirAll(filepath.Join(r.Root, "sub"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(r.Root, "sub", "seed"), []byte("seed\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		r.Workdir = "sub"
		r.Command = []string{"sh", "-c", `printf '%s|%s' "$CRABBOX_SUITE" "$CRABBOX_SPACE"; cat seed >&2`}
	}
	var out, errOut bytes.Buffer
	r.Stdout, r.Stderr = &out, &errOut
	if res, err := b.Run(ctx, r); err != nil || res.ExitCode != 0 {
		t.Fatalf("Run: exit %d, err %v, stderr %q", res.ExitCode, err, errOut.String())
	}
	if want := "conformance|a b 'c'"; out.String() != want {
		t.Errorf("env in the sandbox = %q, want %q", out.String(), want)
	}
	if dir == "" {
		if errOut.String() != "seed\n" {
			t.Errorf("Workdir sub: cat seed = %q, want %q (the command did not run in the checkout's sub)", errOut.String(), "seed\n")
		}
		return
	}
	fb := b.(provider.DelegatedFileBackend)
	if got := readAll(t, ctx, fb, req.LeaseID, dir+"/probe"); got != "here\n" {
		t.Errorf("file written in Dir %s reads %q, want %q (the command did not run in Dir)", dir, got, "here\n")
	}
}

// testCancel cancels a running command once it has printed (which also
// shows that output is streamed before the command ends) and checks that
// Run returns the context's error and that the command and the child it
// started are no longer running.
func testCancel(t *testing.T, ctx context.Context, h DelegatedHarness, b provider.DelegatedRunBackend) {
	req, view := warm(t, ctx, b, "conformance-cancel")
	dir := sandboxDir(t, ctx, b, view)
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	started := &signalWriter{match: "started", fire: cancel}
	r := request(t, req.LeaseID, dir, "sh", "-c", `sleep 300 & echo $! > "$HOME/.crabbox-conformance-pids"; echo $$ >> "$HOME/.crabbox-conformance-pids"; echo started; wait`)
	r.Stdout, r.Stderr = started, io.Discard
	_, err := b.Run(rctx, r)
	if !started.fired() {
		t.Fatalf("Run returned (%v) before the command's output arrived; output is not streamed", err)
	}
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Run after its context was cancelled: err = %v, want one matching context.Canceled", err)
	}
	if !h.ProcessTable {
		return
	}
	// A remote kill may complete just after Run returns: ask until it has.
	check := `for p in $(cat "$HOME/.crabbox-conformance-pids"); do
		if [ -e /proc/$p ] && [ "$(cut -d' ' -f3 /proc/$p/stat)" != Z ]; then echo "$p still runs"; exit 1; fi
	done`
	waitFor(t, ctx, "the cancelled command and its child to end", func() (bool, string) {
		out, code := runOK(t, ctx, b, request(t, req.LeaseID, dir, "sh", "-c", check))
		return code == 0, out
	})
}

func testTimeout(t *testing.T, ctx context.Context, _ DelegatedHarness, b provider.DelegatedRunBackend) {
	req, view := warm(t, ctx, b, "conformance-timeout")
	dir := sandboxDir(t, ctx, b, view)
	rctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	defer cancel()
	r := request(t, req.LeaseID, dir, "sleep", "300")
	r.Stdout, r.Stderr = io.Discard, io.Discard
	if _, err := b.Run(rctx, r); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Run past its deadline: err = %v, want one matching context.DeadlineExceeded", err)
	}
	// The lease still works after a timed-out command.
	if out, code := runOK(t, ctx, b, request(t, req.LeaseID, dir, "echo", "alive")); code != 0 || out != "alive\n" {
		t.Errorf("Run after a timeout: exit %d, output %q", code, out)
	}
}

func testFiles(t *testing.T, ctx context.Context, _ DelegatedHarness, b provider.DelegatedRunBackend) {
	fb, ok := b.(provider.DelegatedFileBackend)
	if !ok {
		t.Skip("backend has no files")
	}
	req, view := warm(t, ctx, b, "conformance-files")
	dir := sandboxDir(t, ctx, b, view)
	write := func(path, body string, mode os.FileMode, size int64) {
		t.Helper()
		err := fb.WriteFile(ctx, provider.WriteFileRequest{LeaseID: req.LeaseID, Path: path, Mode: mode, Body: strings.NewReader(body), Size: size})
		if err != nil {
			t.Fatalf("WriteFile %s: %v", path, err)
		}
	}
	exe, plain := dir+"/deep/er/run.sh", dir+"/plain.txt"
	write(exe, "#!/bin/sh\necho ran\n", 0o755, -1)
	write(plain, "first version, longer\n", 0o644, 22)
	write(plain, "second\n", 0o644, 7)
	if got := readAll(t, ctx, fb, req.LeaseID, plain); got != "second\n" {
		t.Errorf("ReadFile of a replaced file = %q, want %q", got, "second\n")
	}
	if got := readAll(t, ctx, fb, req.LeaseID, exe); got != "#!/bin/sh\necho ran\n" {
		t.Errorf("ReadFile %s = %q", exe, got)
	}
	for path, want := range map[string]int{exe: 0, plain: 1} {
		if _, code := runOK(t, ctx, b, request(t, req.LeaseID, dir, "test", "-x", path)); code != want {
			t.Errorf("test -x %s: exit %d, want %d (mode not applied)", path, code, want)
		}
	}
	if out, code := runOK(t, ctx, b, request(t, req.LeaseID, dir+"/deep/er", "./run.sh")); code != 0 || out != "ran\n" {
		t.Errorf("running the written script: exit %d, output %q", code, out)
	}
	big := strings.Repeat("0123456789abcdef", 64<<10) // 1 MiB
	write(dir+"/big", big, 0o600, int64(len(big)))
	if got := readAll(t, ctx, fb, req.LeaseID, dir+"/big"); got != big {
		t.Errorf("ReadFile of a 1 MiB file returned %d bytes, want %d unchanged", len(got), len(big))
	}
	if _, err := fb.ReadFile(ctx, provider.ReadFileRequest{LeaseID: req.LeaseID, Path: dir + "/missing"}); !errors.Is(err, provider.ErrNotFound) {
		t.Errorf("ReadFile of a missing file: err = %v, want one matching provider.ErrNotFound", err)
	}
}

func readAll(t *testing.T, ctx context.Context, fb provider.DelegatedFileBackend, id, path string) string {
	t.Helper()
	rc, err := fb.ReadFile(ctx, provider.ReadFileRequest{LeaseID: id, Path: path})
	if err != nil {
		t.Fatalf("ReadFile %s: %v", path, err)
	}
	defer rc.Close()
	b, err := io.ReadAll(rc)
	if err != nil {
		t.Fatalf("ReadFile %s: %v", path, err)
	}
	return string(b)
}

func testTouch(t *testing.T, ctx context.Context, _ DelegatedHarness, b provider.DelegatedRunBackend) {
	tb, ok := b.(provider.DelegatedTouchBackend)
	if !ok {
		t.Skip("backend does not move expiry")
	}
	start := time.Now().UTC()
	req, _ := warm(t, ctx, b, "conformance-touch")
	now := time.Now().UTC().Truncate(time.Second)
	later := now.Add(2 * time.Hour)
	// A backend whose service caps lifetimes grants at most its maximum
	// from the sandbox's start, and says so: the granted end, not the
	// one asked for.
	want, limit := later, time.Time{}
	if lc, ok := b.(provider.LifetimeCapper); ok && lc.MaxLifetime() > 0 && start.Add(lc.MaxLifetime()).Before(later) {
		want, limit = start.Add(lc.MaxLifetime()), now.Add(lc.MaxLifetime())
	}
	view, err := tb.Touch(ctx, provider.DelegatedTouchRequest{ID: req.LeaseID, Now: now, ExpiresAt: later})
	if err != nil {
		t.Fatalf("Touch: %v", err)
	}
	// Providers keep timeouts in whole seconds from their own clock.
	if view.ID != req.LeaseID || view.ExpiresAt.Before(want.Add(-time.Minute)) {
		t.Errorf("Touch returned lease %q expiring %v, want %q expiring at or after %v", view.ID, view.ExpiresAt, req.LeaseID, want)
	}
	if !limit.IsZero() && view.ExpiresAt.After(limit.Add(time.Minute)) {
		t.Errorf("Touch past the maximum lifetime returned expiry %v, later than the provider grants (%v)", view.ExpiresAt, limit)
	}
	if st, err := b.Status(ctx, provider.StatusRequest{ID: req.LeaseID}); err != nil {
		t.Fatalf("Status after Touch: %v", err)
	} else if st.ExpiresAt.Before(want.Add(-time.Minute)) {
		t.Errorf("Status after Touch: expires %v, want at or after %v", st.ExpiresAt, want)
	}
	if err := b.Stop(ctx, provider.StopRequest{ID: req.LeaseID}); err != nil {
		t.Fatal(err)
	}
	if _, err := tb.Touch(ctx, provider.DelegatedTouchRequest{ID: req.LeaseID, Now: now, ExpiresAt: later}); !errors.Is(err, provider.ErrNotFound) {
		t.Errorf("Touch of a stopped lease: err = %v, want one matching provider.ErrNotFound", err)
	}
}

// testWarmupNoLeak makes warmup fail or hang, before or after the
// provider did its work, and checks that the library's rollback
// (lease.Store.Warmup) leaves no sandbox and no claim.
func testWarmupNoLeak(t *testing.T, ctx context.Context, _ DelegatedHarness, b provider.DelegatedRunBackend) {
	for _, ft := range []Fault{
		{Step: StepWarmup},
		{Step: StepWarmup, AfterCall: true},
		{Step: StepWarmup, Hang: true},
		{Step: StepWarmup, Hang: true, AfterCall: true},
	} {
		t.Run(fmt.Sprintf("after=%v/hang=%v", ft.AfterCall, ft.Hang), func(t *testing.T) {
			store, err := lease.OpenStore(t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			wctx, cancel := context.WithCancel(ctx)
			defer cancel()
			ft.OnHang = cancel // as if the caller's deadline passed
			_, err = store.Warmup(wctx, WithDelegatedFaults(b, ft), lease.Terms{Labels: map[string]string{"suite": "leak"}})
			if err == nil {
				t.Fatal("Warmup succeeded despite the injected fault")
			}
			if claims, err := store.List(); err != nil || len(claims) != 0 {
				t.Errorf("claims left after a rolled-back warmup: %+v (err %v)", claims, err)
			}
			all, err := b.List(ctx, provider.ListRequest{})
			if err != nil {
				t.Fatal(err)
			}
			for _, v := range all {
				if v.Labels["suite"] == "leak" {
					t.Errorf("lease %s leaked after a failed warmup", v.ID)
					_ = b.Stop(context.Background(), provider.StopRequest{ID: v.ID})
				}
			}
		})
	}
}

func testDelegatedClose(t *testing.T, ctx context.Context, h DelegatedHarness) {
	opts := append([]goleak.Option{goleak.IgnoreCurrent()}, h.IgnoreGoroutines...)
	b := h.NewBackend(t)
	req := warmupRequest("conformance-close")
	view, err := b.Warmup(ctx, req)
	if err != nil {
		t.Fatalf("Warmup: %v", err)
	}
	again := b
	if h.Reopen != nil {
		again = h.Reopen(t, b)
	}
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			_ = again.Stop(context.Background(), provider.StopRequest{ID: req.LeaseID})
		}
	})
	if out, code := runOK(t, ctx, b, request(t, req.LeaseID, sandboxDir(t, ctx, b, view), "echo", "hi")); code != 0 || out != "hi\n" {
		t.Errorf("Run echo hi: exit %d, output %q", code, out)
	}
	CheckClosed(t, b, opts...)
	if err := again.Stop(ctx, provider.StopRequest{ID: req.LeaseID}); err != nil {
		t.Fatalf("Stop after Close: %v", err)
	}
	stopped = true
	if _, err := again.Status(ctx, provider.StatusRequest{ID: req.LeaseID}); !errors.Is(err, provider.ErrNotFound) {
		t.Errorf("Status after Stop: err = %v, want one matching provider.ErrNotFound", err)
	}
}

// signalWriter discards what is written and calls fire once the output
// so far contains match.
type signalWriter struct {
	mu    sync.Mutex
	buf   bytes.Buffer
	match string
	fire  func()
	done  bool
}

func (w *signalWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf.Write(p)
	if !w.done && strings.Contains(w.buf.String(), w.match) {
		w.done = true
		w.fire()
	}
	return len(p), nil
}

func (w *signalWriter) fired() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.done
}

// waitFor asks cond until it holds, failing the test when ctx ends first.
func waitFor(t *testing.T, ctx context.Context, what string, cond func() (bool, string)) {
	t.Helper()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		ok, detail := cond()
		if ok {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("waiting for %s: %v (last: %s)", what, ctx.Err(), detail)
		case <-tick.C:
		}
	}
}
