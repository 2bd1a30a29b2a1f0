//go:build unix

package e2b_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/jonboulle/clockwork"

	"github.com/crabbox-dev/crabbox/provider"
	"github.com/crabbox-dev/crabbox/providers/e2b"
)

func TestLifecycle(t *testing.T) {
	f := newFake(t)
	b := newBackend(t, f)
	ctx := testContext(t)

	v := warmup(t, ctx, b, "tidal-lobster")
	ids := f.sandboxIDs()
	if len(ids) != 1 {
		t.Fatalf("sandboxes after warmup: %v, want one", ids)
	}
	if v.CloudID != ids[0] || v.Provider != e2b.Name || v.Slug != "tidal-lobster" || v.WorkRoot != f.root+"/work" {
		t.Errorf("warmup view = %+v", v)
	}
	if want := f.clock.Now().Add(30 * time.Minute); !v.ExpiresAt.Equal(want) || !f.endAt(ids[0]).Equal(want) {
		t.Errorf("expiry: view %s, sandbox %s, want %s (the idle timeout)", v.ExpiresAt, f.endAt(ids[0]), want)
	}
	if v.Labels["team"] != "crabs" || v.Labels["lease"] != v.ID || v.Labels["crabbox"] != "true" {
		t.Errorf("labels = %v", v.Labels)
	}
	if st, err := os.Stat(f.root + "/work"); err != nil || !st.IsDir() {
		t.Errorf("warmup did not make the work root: %v", err)
	}

	for _, id := range []string{v.ID, v.Slug} {
		got, err := b.Status(ctx, provider.StatusRequest{ID: id})
		if err != nil {
			t.Fatalf("status %s: %v", id, err)
		}
		if diff := cmp.Diff(v, got); diff != "" {
			t.Errorf("status %s differs from warmup (-warmup +status):\n%s", id, diff)
		}
	}
	list, err := b.List(ctx, provider.ListRequest{})
	if err != nil || len(list) != 1 || list[0].ID != v.ID {
		t.Fatalf("list = %v, %v; want the lease", list, err)
	}

	f.clock.(*clockwork.FakeClock).Advance(10 * time.Minute)
	later := f.clock.Now().Add(30 * time.Minute)
	touched, err := b.Touch(ctx, provider.DelegatedTouchRequest{ID: v.ID, Now: f.clock.Now(), ExpiresAt: later})
	if err != nil {
		t.Fatal(err)
	}
	if !touched.ExpiresAt.Equal(later) || !f.endAt(v.CloudID).Equal(later) {
		t.Errorf("touch: view expires %s, sandbox %s, want %s", touched.ExpiresAt, f.endAt(v.CloudID), later)
	}

	if err := b.Stop(ctx, provider.StopRequest{ID: v.ID}); err != nil {
		t.Fatal(err)
	}
	if ids := f.sandboxIDs(); len(ids) != 0 {
		t.Errorf("sandboxes after stop: %v", ids)
	}
	if _, err := b.Status(ctx, provider.StatusRequest{ID: v.ID}); !errors.Is(err, provider.ErrNotFound) {
		t.Errorf("status after stop: %v, want ErrNotFound", err)
	}
	if err := b.Stop(ctx, provider.StopRequest{ID: v.ID}); err != nil {
		t.Errorf("second stop: %v, want nil (already gone)", err)
	}
	if err := b.Stop(ctx, provider.StopRequest{ID: "tidal-lobster"}); err != nil {
		t.Errorf("stop by slug of a gone lease: %v", err)
	}
}

// E2B kills a sandbox at its timeout: the lease is gone without cleanup.
func TestSelfExpiry(t *testing.T) {
	f := newFake(t)
	b := newBackend(t, f)
	ctx := testContext(t)
	v := warmup(t, ctx, b, "")
	f.clock.(*clockwork.FakeClock).Advance(30 * time.Minute)
	if _, err := b.Status(ctx, provider.StatusRequest{ID: v.ID}); !errors.Is(err, provider.ErrNotFound) {
		t.Errorf("status after the timeout: %v, want ErrNotFound", err)
	}
	if ids := f.sandboxIDs(); len(ids) != 0 {
		t.Errorf("sandboxes after the timeout: %v", ids)
	}
	if _, err := b.Touch(ctx, provider.DelegatedTouchRequest{ID: v.ID, ExpiresAt: f.clock.Now().Add(time.Hour)}); !errors.Is(err, provider.ErrNotFound) {
		t.Errorf("touch after the timeout: %v, want ErrNotFound", err)
	}
}

func TestListPages(t *testing.T) {
	f := newFake(t)
	f.pageSize = 2
	b := newBackend(t, f)
	ctx := testContext(t)
	want := map[string]bool{}
	for range 5 {
		want[warmup(t, ctx, b, "").ID] = true
	}
	list, err := b.List(ctx, provider.ListRequest{})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	for _, v := range list {
		got[v.ID] = true
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("list over pages of 2 (-want +got):\n%s", diff)
	}
}

func TestRun(t *testing.T) {
	f := newFake(t)
	b := newBackend(t, f)
	ctx := testContext(t)
	v := warmup(t, ctx, b, "")
	dir := filepath.Join(f.root, "work", "repo")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name           string
		command        []string
		env            map[string]string
		code           int
		stdout, stderr string
	}{
		{"success", []string{"true"}, nil, 0, "", ""},
		{"exit code", []string{"sh", "-c", "exit 3"}, nil, 3, "", ""},
		{"exit 255", []string{"sh", "-c", "exit 255"}, nil, 255, "", ""},
		{"streams apart", []string{"sh", "-c", "echo out; echo err >&2"}, nil, 0, "out\n", "err\n"},
		{"arguments stay apart", []string{"printf", "%s|", "a b", "$HOME", "'"}, nil, 0, "a b|$HOME|'|", ""},
		{"env and dir", []string{"sh", "-c", `echo "$GREETING from $(pwd)"`}, map[string]string{"GREETING": "hi"}, 0, "hi from " + dir + "\n", ""},
		{"SIGTERM", []string{"sh", "-c", "kill -TERM $$"}, nil, 128 + 15, "", ""},
		{"SIGKILL", []string{"sh", "-c", "kill -KILL $$"}, nil, 128 + 9, "", ""},
		{"SIGSEGV", []string{"sh", "-c", "kill -SEGV $$"}, nil, 128 + 11, "", ""},
		{"not found", []string{"no-such-command-crabbox"}, nil, 127, "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			res, err := b.Run(ctx, provider.DelegatedRunRequest{
				LeaseID: v.ID, Command: tc.command, Env: tc.env, Dir: dir, Stdout: &stdout, Stderr: &stderr,
			})
			if err != nil {
				t.Fatal(err)
			}
			if res.ExitCode != tc.code {
				t.Errorf("exit code %d, want %d (stderr %q)", res.ExitCode, tc.code, stderr.String())
			}
			if stdout.String() != tc.stdout || tc.stderr != "" && stderr.String() != tc.stderr {
				t.Errorf("stdout %q, stderr %q; want %q, %q", stdout.String(), stderr.String(), tc.stdout, tc.stderr)
			}
		})
	}
	// A directory that does not exist yet is made.
	var out bytes.Buffer
	missing := filepath.Join(dir, "missing", "deeper")
	if res, err := b.Run(ctx, provider.DelegatedRunRequest{LeaseID: v.ID, Command: []string{"pwd"}, Dir: missing, Stdout: &out}); err != nil || res.ExitCode != 0 || out.String() != missing+"\n" {
		t.Errorf("run in a missing directory: %v, exit %d, pwd %q; want it made and used", err, res.ExitCode, out.String())
	}
	// One that cannot be made fails with envd's refusal and mkdir's error.
	if err := os.WriteFile(filepath.Join(dir, "file"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Run(ctx, provider.DelegatedRunRequest{LeaseID: v.ID, Command: []string{"true"}, Dir: filepath.Join(dir, "file", "sub")}); err == nil || !strings.Contains(err.Error(), "does not exist") || !strings.Contains(err.Error(), "mkdir") {
		t.Errorf("run in a directory under a file: %v, want envd's and mkdir's errors", err)
	}
	if _, err := b.Run(ctx, provider.DelegatedRunRequest{LeaseID: v.ID, Command: []string{"true"}, Dir: "relative"}); err == nil {
		t.Error("run in a relative directory: no error")
	}
	if _, err := b.Run(ctx, provider.DelegatedRunRequest{LeaseID: v.ID}); err == nil {
		t.Error("run without a command: no error")
	}
	if _, err := b.Run(ctx, provider.DelegatedRunRequest{LeaseID: "cbx_000000000000", Command: []string{"true"}}); !errors.Is(err, provider.ErrNotFound) {
		t.Errorf("run on an unknown lease: %v, want ErrNotFound", err)
	}
}

// Stdin reaches the command through envd's SendInput and CloseStdin: the
// command reads it to its end; one that does not read it all ends the run
// as usual; a failing Stdin kills the command and fails the run.
func TestRunStdin(t *testing.T) {
	f := newFake(t)
	b := newBackend(t, f)
	ctx := testContext(t)
	v := warmup(t, ctx, b, "")
	big := bytes.Repeat([]byte("0123456789\n"), 30000) // several SendInput chunks
	for _, tc := range []struct {
		name    string
		command []string
		stdin   []byte
		stdout  string
	}{
		{"cat", []string{"cat"}, []byte("hello\n"), "hello\n"},
		{"wc -l", []string{"sh", "-c", "wc -l | tr -d ' '"}, []byte("a\nb\n"), "2\n"},
		{"large", []string{"sh", "-c", "wc -c | tr -d ' '"}, big, fmt.Sprintf("%d\n", len(big))},
		{"empty", []string{"sh", "-c", "wc -c | tr -d ' '"}, nil, "0\n"},
		{"not read", []string{"true"}, big, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var stdout bytes.Buffer
			res, err := b.Run(ctx, provider.DelegatedRunRequest{LeaseID: v.ID, Command: tc.command, Stdin: bytes.NewReader(tc.stdin), Stdout: &stdout})
			if err != nil || res.ExitCode != 0 || stdout.String() != tc.stdout {
				t.Errorf("Run = %+v, %v, stdout %q; want exit 0 and %q", res, err, stdout.String(), tc.stdout)
			}
		})
	}
	t.Run("read error", func(t *testing.T) {
		broken := errors.New("disk on fire")
		var stdout bytes.Buffer
		_, err := b.Run(ctx, provider.DelegatedRunRequest{
			LeaseID: v.ID, Command: []string{"sh", "-c", "cat >/dev/null; echo saw the end"},
			Stdin: io.MultiReader(strings.NewReader("partial\n"), failingReader{broken}), Stdout: &stdout,
		})
		if !errors.Is(err, broken) || stdout.String() != "" {
			t.Errorf("Run error = %v, stdout %q; want the read error and no output", err, stdout.String())
		}
	})
}

type failingReader struct{ err error }

func (r failingReader) Read([]byte) (int, error) { return 0, r.err }

// Output reaches the caller while the command still runs: the command
// waits on a FIFO that the test writes to only once it saw the first line.
func TestRunStreams(t *testing.T) {
	f := newFake(t)
	b := newBackend(t, f)
	ctx := testContext(t)
	v := warmup(t, ctx, b, "")
	fifo := filepath.Join(f.root, "go")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	stdout := &watch{marker: "first\n", fn: func() {
		if err := os.WriteFile(fifo, []byte("go\n"), 0o600); err != nil {
			t.Error(err)
		}
	}}
	res, err := b.Run(ctx, provider.DelegatedRunRequest{
		LeaseID: v.ID, Command: []string{"sh", "-c", `echo first; read x < "$1"; echo "second $x"`, "sh", fifo},
		Dir: f.root, Stdout: stdout,
	})
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("run: %v, exit %d", err, res.ExitCode)
	}
	if got := stdout.String(); got != "first\nsecond go\n" {
		t.Errorf("stdout %q", got)
	}
}

// Cancelling a run ends the remote command and what it started before Run
// returns; the fake's commands end only when nothing holds their output
// any more, so waitIdle returning proves that the background child died.
func TestRunCancel(t *testing.T) {
	for _, tc := range []struct {
		name  string
		fault *fakeFault
	}{
		{name: "while running"},
		// The start event never arrives: the command is found by its tag.
		{name: "start answer lost", fault: &fakeFault{op: "start", after: true, hang: true, times: 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFake(t)
			b := newBackend(t, f)
			v := warmup(t, testContext(t), b, "")
			ctx, cancel := context.WithCancel(testContext(t))
			defer cancel()
			marker := filepath.Join(f.root, "child-started")
			stdout := &watch{marker: "started", fn: cancel}
			if tc.fault != nil {
				tc.fault.onHang = cancel
				f.fail(*tc.fault)
			}
			_, err := b.Run(ctx, provider.DelegatedRunRequest{
				LeaseID: v.ID, Dir: f.root, Stdout: stdout,
				Command: []string{"sh", "-c", `sleep 300 & touch "$1"; echo started; wait`, "sh", marker},
			})
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("run: %v, want context.Canceled", err)
			}
			f.waitIdle()
			if ids := f.sandboxIDs(); len(ids) != 1 {
				t.Errorf("sandboxes: %v; cancelling a run must not end the lease", ids)
			}
		})
	}
}

func TestFiles(t *testing.T) {
	f := newFake(t)
	b := newBackend(t, f)
	ctx := testContext(t)
	v := warmup(t, ctx, b, "")
	p := f.root + "/work/repo/.crabbox/bin/tool"
	body := bytes.Repeat([]byte("crab"), 100_000)
	if err := b.WriteFile(ctx, provider.WriteFileRequest{LeaseID: v.ID, Path: p, Mode: 0o750, Body: bytes.NewReader(body), Size: int64(len(body))}); err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o750 {
		t.Errorf("mode %v, want 0750", st.Mode().Perm())
	}
	rc, err := b.ReadFile(ctx, provider.ReadFileRequest{LeaseID: v.ID, Path: p})
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(rc)
	rc.Close()
	if err != nil || !bytes.Equal(got, body) {
		t.Errorf("read back %d bytes (%v), want %d", len(got), err, len(body))
	}
	// Replacing a file takes the new mode and content.
	if err := b.WriteFile(ctx, provider.WriteFileRequest{LeaseID: v.ID, Path: p, Mode: 0o644, Body: strings.NewReader("new"), Size: -1}); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(p); string(got) != "new" {
		t.Errorf("replaced content %q", got)
	}
	if st, _ := os.Stat(p); st.Mode().Perm() != 0o644 {
		t.Errorf("replaced mode %v, want 0644", st.Mode().Perm())
	}

	if _, err := b.ReadFile(ctx, provider.ReadFileRequest{LeaseID: v.ID, Path: f.root + "/missing"}); !errors.Is(err, provider.ErrNotFound) {
		t.Errorf("read a missing file: %v, want ErrNotFound", err)
	}
	for _, bad := range []string{"relative/file", "/a/../b", "/a//b", ""} {
		if err := b.WriteFile(ctx, provider.WriteFileRequest{LeaseID: v.ID, Path: bad, Mode: 0o644, Body: strings.NewReader("x")}); err == nil {
			t.Errorf("write %q: no error", bad)
		}
		if _, err := b.ReadFile(ctx, provider.ReadFileRequest{LeaseID: v.ID, Path: bad}); err == nil {
			t.Errorf("read %q: no error", bad)
		}
	}
	if err := b.WriteFile(ctx, provider.WriteFileRequest{LeaseID: v.ID, Path: f.root + "/work/bad", Mode: 0o644, Body: iotestErrReader{}}); err == nil || !strings.Contains(err.Error(), "broken reader") {
		t.Errorf("write from a failing reader: %v", err)
	}
	if _, err := os.Stat(f.root + "/work/bad"); err == nil {
		if got, _ := os.ReadFile(f.root + "/work/bad"); len(got) != 0 {
			t.Errorf("a failed write left content %q", got)
		}
	}
}

type iotestErrReader struct{}

func (iotestErrReader) Read([]byte) (int, error) { return 0, errors.New("broken reader") }
