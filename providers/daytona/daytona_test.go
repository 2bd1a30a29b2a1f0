//go:build unix

package daytona_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/crabbox-dev/crabbox/provider"
	"github.com/crabbox-dev/crabbox/providers/daytona"
)

func TestLifecycle(t *testing.T) {
	ctx := testContext(t)
	f := newFakeDaytona(t)
	f.startPolls = 3
	b := newBackend(t, f, func(c *daytona.Config) { c.Snapshot, c.User, c.Target = "crabbox-base", "runner", "eu" })

	req := warmupRequest("blue-crab")
	v, err := b.Warmup(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	s := f.only()
	home := filepath.Join(s.dir, "home", "daytona")
	want := provider.LeaseView{
		ID: req.LeaseID, Slug: "blue-crab", Provider: "daytona", CloudID: s.ID, State: "started",
		CreatedAt: v.CreatedAt, ExpiresAt: req.ExpiresAt.Truncate(time.Second).UTC(), WorkRoot: home + "/crabbox",
	}
	if diff := cmp.Diff(want, v, cmp.FilterPath(func(p cmp.Path) bool { return p.String() == "Labels" }, cmp.Ignore())); diff != "" {
		t.Errorf("warmup view (-want +got):\n%s", diff)
	}
	if v.Labels["team"] != "infra" || v.Labels["lease"] != req.LeaseID || v.Labels["state"] != "ready" || v.Labels["owner"] != "tester" {
		t.Errorf("labels %v: want the caller's, the lease, state ready and the owner", v.Labels)
	}

	var create struct {
		Name, Snapshot, User, Target         string
		AutoStopInterval, AutoDeleteInterval int
		Labels                               map[string]string
		BuildInfo                            *json.RawMessage
	}
	if err := json.Unmarshal(f.firstCreate(), &create); err != nil {
		t.Fatal(err)
	}
	if create.Name != s.Name || create.Snapshot != "crabbox-base" || create.User != "runner" || create.Target != "eu" ||
		create.AutoStopInterval != 30 || create.AutoDeleteInterval != 0 || create.BuildInfo != nil || create.Labels["state"] != "provisioning" {
		t.Errorf("create request %s: want the snapshot, user, target, auto-stop 30, auto-delete 0, state provisioning", f.firstCreate())
	}

	for _, ref := range []string{req.LeaseID, "blue-crab"} {
		got, err := b.Status(ctx, provider.StatusRequest{ID: ref})
		if err != nil {
			t.Fatalf("status %s: %v", ref, err)
		}
		if diff := cmp.Diff(v, got); diff != "" {
			t.Errorf("status %s (-warmup +status):\n%s", ref, diff)
		}
	}

	other := warmup(t, ctx, b, "red-crab")
	third := warmup(t, ctx, b, "")
	list, err := b.List(ctx, provider.ListRequest{})
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, l := range list {
		ids = append(ids, l.ID)
	}
	if len(ids) != 3 || !containsAll(ids, v.ID, other.ID, third.ID) {
		t.Errorf("list %v: want the three leases (across pages of 2)", ids)
	}

	now := time.Now().UTC()
	touched, err := b.Touch(ctx, provider.DelegatedTouchRequest{ID: v.ID, Now: now, ExpiresAt: now.Add(2 * time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	// Daytona counts auto-stop from the last activity (the creation here).
	sb := f.lookupCopy(v.CloudID)
	wantStop := int((now.Add(2*time.Hour).Sub(sb.CreatedAt) + time.Minute - 1) / time.Minute)
	if !touched.ExpiresAt.Equal(now.Add(2*time.Hour).Truncate(time.Second)) || sb.AutoStop != wantStop {
		t.Errorf("touch: expiry %s and auto-stop %d, want %s and %d", touched.ExpiresAt, sb.AutoStop, now.Add(2*time.Hour), wantStop)
	}

	if err := b.Stop(ctx, provider.StopRequest{ID: v.ID}); err != nil {
		t.Fatal(err)
	}
	if err := b.Stop(ctx, provider.StopRequest{ID: "red-crab"}); err != nil {
		t.Fatal(err)
	}
	for _, ref := range []string{v.ID, other.ID, "blue-crab"} {
		if _, err := b.Status(ctx, provider.StatusRequest{ID: ref}); !errors.Is(err, provider.ErrNotFound) {
			t.Errorf("status of stopped %s: %v, want ErrNotFound", ref, err)
		}
	}
	if err := b.Stop(ctx, provider.StopRequest{ID: v.ID}); err != nil {
		t.Errorf("second stop: %v, want success", err)
	}
	if n := f.sandboxCount(); n != 1 {
		t.Errorf("%d sandboxes left, want only the third", n)
	}
}

func containsAll(have []string, want ...string) bool {
	for _, w := range want {
		found := false
		for _, h := range have {
			found = found || h == w
		}
		if !found {
			return false
		}
	}
	return true
}

func (f *fakeDaytona) firstCreate() []byte {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.creates[0]
}

func (f *fakeDaytona) callCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.calls)
}

func (f *fakeDaytona) lookupCopy(id string) fakeSandbox {
	f.mu.Lock()
	defer f.mu.Unlock()
	return *f.sandboxes[id]
}

func TestWarmupFromImage(t *testing.T) {
	ctx := testContext(t)
	f := newFakeDaytona(t)
	b := newBackend(t, f, func(c *daytona.Config) { c.Image, c.WorkRoot = "debian:12", "/srv/work" })
	v := warmup(t, ctx, b, "")
	var create struct {
		BuildInfo struct{ DockerfileContent string }
	}
	if err := json.Unmarshal(f.firstCreate(), &create); err != nil {
		t.Fatal(err)
	}
	if create.BuildInfo.DockerfileContent != "FROM debian:12\n" || v.WorkRoot != "/srv/work" {
		t.Errorf("build info %q, work root %q: want FROM debian:12 and the configured root", create.BuildInfo.DockerfileContent, v.WorkRoot)
	}
}

func TestRun(t *testing.T) {
	ctx := testContext(t)
	f := newFakeDaytona(t)
	b := newBackend(t, f)
	v := warmup(t, ctx, b, "")
	dir := path.Join(v.WorkRoot, "repo")
	if err := b.WriteFile(ctx, provider.WriteFileRequest{LeaseID: v.ID, Path: dir + "/.keep", Mode: 0o644, Body: strings.NewReader(""), Size: 0}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name           string
		command        []string
		env            map[string]string
		stdout, stderr string
		code           int
	}{
		{"success", []string{"echo", "hello world"}, nil, "hello world\n", "", 0},
		{"exit code", []string{"sh", "-c", "echo out; echo err >&2; exit 3"}, nil, "out\n", "err\n", 3},
		{"exit ends only the command", []string{"sh", "-c", "exit 0"}, nil, "", "", 0},
		{"signal is 128+n", []string{"sh", "-c", "kill -TERM $$"}, nil, "", anyStderr, 143},
		{"quoting and env", []string{"sh", "-c", `printf '%s|%s|%s' "$1" "$GREETING" "$(pwd)"`, "x", "it's a 'test'"},
			map[string]string{"GREETING": "hi $HOME `x`"}, "it's a 'test'|hi $HOME `x`|" + dir, "", 0},
		{"reserved word", []string{"if"}, nil, "", anyStderr, 127},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			res, err := b.Run(ctx, provider.DelegatedRunRequest{LeaseID: v.ID, Command: tc.command, Env: tc.env, Dir: dir, Stdout: &stdout, Stderr: &stderr})
			if err != nil {
				t.Fatal(err)
			}
			if res.ExitCode != tc.code || stdout.String() != tc.stdout || (tc.stderr != anyStderr && stderr.String() != tc.stderr) {
				t.Errorf("exit %d, stdout %q, stderr %q; want %d, %q, %q", res.ExitCode, stdout.String(), stderr.String(), tc.code, tc.stdout, tc.stderr)
			}
		})
	}
	if sessions, commands := f.running(); sessions != 0 || commands != 0 {
		t.Errorf("%d sessions and %d commands left, want none", sessions, commands)
	}
}

// anyStderr accepts whatever the shell says on stderr.
const anyStderr = "(any)"

func TestRunRejectsBadInput(t *testing.T) {
	ctx := testContext(t)
	f := newFakeDaytona(t)
	b := newBackend(t, f)
	v := warmup(t, ctx, b, "")
	for name, req := range map[string]provider.DelegatedRunRequest{
		"no command":       {LeaseID: v.ID},
		"relative dir":     {LeaseID: v.ID, Command: []string{"true"}, Dir: "repo"},
		"dir with ..":      {LeaseID: v.ID, Command: []string{"true"}, Dir: "/a/../etc"},
		"bad env name":     {LeaseID: v.ID, Command: []string{"true"}, Env: map[string]string{"A=B": "c"}},
		"root without dir": {LeaseID: v.ID, Command: []string{"true"}, Root: "/src/repo"},
	} {
		before := f.callCount()
		if _, err := b.Run(ctx, req); err == nil {
			t.Errorf("%s: no error", name)
		}
		if f.callCount() != before {
			t.Errorf("%s: %d API calls, want none", name, f.callCount()-before)
		}
	}
	if _, err := b.Run(ctx, provider.DelegatedRunRequest{LeaseID: "cbx_000000000000", Command: []string{"true"}}); !errors.Is(err, provider.ErrNotFound) {
		t.Errorf("run on an unknown lease: %v, want ErrNotFound", err)
	}
}

// Output reaches the caller while the command still runs.
func TestRunStreams(t *testing.T) {
	ctx := testContext(t)
	f := newFakeDaytona(t)
	b := newBackend(t, f)
	v := warmup(t, ctx, b, "")
	gate := path.Join(v.WorkRoot, "gate")
	stdout := newSignalWriter("first\n")
	done := make(chan error, 1)
	go func() {
		_, err := b.Run(ctx, provider.DelegatedRunRequest{LeaseID: v.ID, Stdout: stdout, Stderr: io.Discard,
			Command: []string{"sh", "-c", `echo first; while [ ! -e "$1" ]; do sleep 0.01; done; echo second`, "sh", gate}})
		done <- err
	}()
	select {
	case <-stdout.seen:
	case err := <-done:
		t.Fatalf("run ended before its first line arrived: %v", err)
	}
	if err := b.WriteFile(ctx, provider.WriteFileRequest{LeaseID: v.ID, Path: gate, Mode: 0o644, Body: strings.NewReader("go")}); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if got := stdout.String(); got != "first\nsecond\n" {
		t.Errorf("stdout %q", got)
	}
}

// Cancelling the context ends the remote command and its children, and
// deletes the session, before Run returns.
func TestRunCancel(t *testing.T) {
	f := newFakeDaytona(t)
	b := newBackend(t, f)
	v := warmup(t, testContext(t), b, "")
	ctx, cancel := context.WithCancel(testContext(t))
	defer cancel()
	stdout := newSignalWriter("started\n")
	done := make(chan error, 1)
	go func() {
		_, err := b.Run(ctx, provider.DelegatedRunRequest{LeaseID: v.ID, Stdout: stdout,
			Command: []string{"sh", "-c", "sleep 1000 & echo started; wait"}})
		done <- err
	}()
	<-stdout.seen
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("run: %v, want context.Canceled", err)
	}
	if sessions, commands := f.running(); sessions != 0 || commands != 0 {
		t.Errorf("%d sessions and %d commands left after cancel, want none", sessions, commands)
	}
}

func TestFiles(t *testing.T) {
	ctx := testContext(t)
	f := newFakeDaytona(t)
	b := newBackend(t, f)
	v := warmup(t, ctx, b, "")
	p := v.WorkRoot + "/a/b/run.sh"
	body := bytes.Repeat([]byte("#!/bin/sh\necho hi\n"), 10000)
	if err := b.WriteFile(ctx, provider.WriteFileRequest{LeaseID: v.ID, Path: p, Mode: 0o750, Body: bytes.NewReader(body), Size: int64(len(body))}); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(p) // the fake's sandbox paths are real paths
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o750 {
		t.Errorf("mode %v, want 0750", fi.Mode().Perm())
	}
	rc, err := b.ReadFile(ctx, provider.ReadFileRequest{LeaseID: v.ID, Path: p})
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(rc)
	rc.Close()
	if err != nil || !bytes.Equal(got, body) {
		t.Errorf("read back %d bytes (%v), want the %d written", len(got), err, len(body))
	}
	if _, err := b.ReadFile(ctx, provider.ReadFileRequest{LeaseID: v.ID, Path: v.WorkRoot + "/missing"}); !errors.Is(err, provider.ErrNotFound) {
		t.Errorf("read of a missing file: %v, want ErrNotFound", err)
	}
	before := f.callCount()
	for _, bad := range []string{"relative/x", "/a/../../etc/passwd", "/a/\nb"} {
		if err := b.WriteFile(ctx, provider.WriteFileRequest{LeaseID: v.ID, Path: bad, Mode: 0o644, Body: strings.NewReader("x")}); err == nil {
			t.Errorf("write %q: no error", bad)
		}
		if _, err := b.ReadFile(ctx, provider.ReadFileRequest{LeaseID: v.ID, Path: bad}); err == nil {
			t.Errorf("read %q: no error", bad)
		}
	}
	if f.callCount() != before {
		t.Errorf("bad paths made %d API calls, want none", f.callCount()-before)
	}
}

// A failed upload leaves no goroutine behind (checked by goleak) and says
// what failed.
func TestWriteFileFailure(t *testing.T) {
	ctx := testContext(t)
	f := newFakeDaytona(t)
	b := newBackend(t, f)
	v := warmup(t, ctx, b, "")
	f.setFault(opUpload, failFirst)
	err := b.WriteFile(ctx, provider.WriteFileRequest{LeaseID: v.ID, Path: v.WorkRoot + "/big", Mode: 0o644,
		Body: io.LimitReader(zeros{}, 64<<20), Size: 64 << 20})
	if !errors.Is(err, provider.ErrTransient) || !strings.Contains(err.Error(), "upload the file") {
		t.Errorf("write: %v, want a transient upload error", err)
	}
	if _, err := os.Stat(v.WorkRoot + "/big"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the file exists after a failed upload: %v", err)
	}
}

type zeros struct{}

func (zeros) Read(p []byte) (int, error) { clear(p); return len(p), nil }

func TestAPIKeyStaysSecret(t *testing.T) {
	ctx := testContext(t)
	f := newFakeDaytona(t)
	b := newBackend(t, f, func(c *daytona.Config) { c.APIKey = "dtn_wrong_secret" })
	_, err := b.Warmup(ctx, warmupRequest(""))
	if !errors.Is(err, provider.ErrUnauthenticated) {
		t.Fatalf("warmup with a wrong key: %v, want ErrUnauthenticated", err)
	}
	if strings.Contains(err.Error(), "dtn_wrong_secret") {
		t.Errorf("the error shows the key: %v", err)
	}
}

func TestDoctor(t *testing.T) {
	ctx := testContext(t)
	f := newFakeDaytona(t)
	for _, tc := range []struct {
		name string
		edit func(*daytona.Config)
		want []provider.Check
	}{
		{"default", func(*daytona.Config) {}, []provider.Check{{Name: "daytona API " + f.server.URL + "/api", OK: true, Detail: "key accepted"}}},
		{"snapshot", func(c *daytona.Config) { c.Snapshot = "crabbox-base" }, []provider.Check{
			{Name: "daytona API " + f.server.URL + "/api", OK: true, Detail: "key accepted"},
			{Name: "snapshot crabbox-base", OK: true, Detail: "state active"}}},
		{"missing snapshot", func(c *daytona.Config) { c.Snapshot = "nope" }, []provider.Check{
			{Name: "daytona API " + f.server.URL + "/api", OK: true, Detail: "key accepted"},
			{Name: "snapshot nope", Detail: "look up the snapshot: not found: HTTP 404: Snapshot not found"}}},
		{"wrong key", func(c *daytona.Config) { c.APIKey = "dtn_wrong" }, []provider.Check{
			{Name: "daytona API " + f.server.URL + "/api", Detail: "list sandboxes: unauthenticated: HTTP 401: Invalid API key"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := f.sandboxCount()
			got, err := newBackend(t, f, tc.edit).Doctor(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("checks (-want +got):\n%s", diff)
			}
			if f.sandboxCount() != before {
				t.Error("doctor changed the sandboxes")
			}
		})
	}
}
