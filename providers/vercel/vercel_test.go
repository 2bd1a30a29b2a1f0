//go:build unix

package vercel_test

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/crabbox-dev/crabbox/internal/logbuf"
	"github.com/crabbox-dev/crabbox/provider"
	"github.com/crabbox-dev/crabbox/providers/vercel"
)

func TestLifecycle(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	now := e.clock.Now()
	v := e.warmup("blue-crab", map[string]string{"team": "infra"})
	want := provider.LeaseView{
		ID: v.ID, Slug: "blue-crab", Provider: "vercel", CloudID: vercel.SandboxName(v.ID), State: "running",
		Labels:    map[string]string{"crabbox": "true", "lease": v.ID, "slug": "blue-crab", "team": "infra"},
		CreatedAt: now, ExpiresAt: now.Add(30 * time.Minute), WorkRoot: e.fake.dir + "/work",
	}
	if diff := cmp.Diff(want, v); diff != "" {
		t.Fatalf("Warmup view (-want +got):\n%s", diff)
	}
	for _, id := range []string{v.ID, "blue-crab"} {
		got, err := e.b.Status(ctx, provider.StatusRequest{ID: id})
		if err != nil {
			t.Fatalf("Status(%s): %v", id, err)
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("Status(%s) (-want +got):\n%s", id, diff)
		}
	}
	list, err := e.b.List(ctx, provider.ListRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]provider.LeaseView{want}, list); diff != "" {
		t.Errorf("List (-want +got):\n%s", diff)
	}

	// Files in, a command on them, files out.
	dir := v.WorkRoot + "/repo"
	script := "#!/bin/sh\necho \"hi from $1 in $(pwd)\"\necho oops >&2\nexit 3\n"
	if err := e.b.WriteFile(ctx, provider.WriteFileRequest{
		LeaseID: v.ID, Path: dir + "/bin/hello.sh", Mode: 0o755, Body: strings.NewReader(script), Size: int64(len(script)),
	}); err != nil {
		t.Fatalf("WriteFile: %v", err)
	}
	if err := e.b.WriteFile(ctx, provider.WriteFileRequest{
		LeaseID: v.ID, Path: dir + "/note.txt", Mode: 0o600, Body: strings.NewReader("unknown size\n"), Size: -1,
	}); err != nil {
		t.Fatalf("WriteFile of unknown size: %v", err)
	}
	if fi, err := os.Stat(filepath.Join(dir, "bin/hello.sh")); err != nil || fi.Mode().Perm() != 0o755 {
		t.Errorf("hello.sh in the sandbox: %v, %v; want mode 0755", fi, err)
	}
	code, stdout, stderr, err := e.run(ctx, v.ID, dir, "./bin/hello.sh", "crab")
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	if code != 3 || stdout != "hi from crab in "+dir+"\n" || stderr != "oops\n" {
		t.Errorf("Run = %d, %q, %q; want 3, hi from crab in %s, oops", code, stdout, stderr, dir)
	}
	var out logbuf.Buffer
	res, err := e.b.Run(ctx, provider.DelegatedRunRequest{
		LeaseID: v.ID, Command: []string{"sh", "-c", "echo $GREETING; cat note.txt"}, Dir: dir,
		Env: map[string]string{"GREETING": "hello"}, Stdout: &out,
	})
	if err != nil || res.ExitCode != 0 || out.String() != "hello\nunknown size\n" {
		t.Errorf("Run with env = %v, %v, %q", res, err, out.String())
	}
	rc, err := e.b.ReadFile(ctx, provider.ReadFileRequest{LeaseID: v.ID, Path: dir + "/bin/hello.sh"})
	if err != nil {
		t.Fatalf("ReadFile: %v", err)
	}
	body, err := io.ReadAll(rc)
	rc.Close()
	if err != nil || string(body) != script {
		t.Errorf("ReadFile = %q, %v; want the script", body, err)
	}
	if _, err := e.b.ReadFile(ctx, provider.ReadFileRequest{LeaseID: v.ID, Path: dir + "/missing"}); !errors.Is(err, provider.ErrNotFound) {
		t.Errorf("ReadFile of a missing file: %v, want ErrNotFound", err)
	}

	// Touch moves the session's timeout forward, never back.
	got, err := e.b.Touch(ctx, provider.DelegatedTouchRequest{ID: v.ID, Now: now, ExpiresAt: now.Add(40 * time.Minute)})
	if err != nil || !got.ExpiresAt.Equal(now.Add(40*time.Minute)) {
		t.Errorf("Touch = %v, %v; want expiry %s", got.ExpiresAt, err, now.Add(40*time.Minute))
	}
	if got, err := e.b.Touch(ctx, provider.DelegatedTouchRequest{ID: v.ID, Now: now, ExpiresAt: now.Add(10 * time.Minute)}); err != nil || !got.ExpiresAt.Equal(now.Add(40*time.Minute)) {
		t.Errorf("Touch to an earlier expiry = %v, %v; want it unchanged", got.ExpiresAt, err)
	}

	if err := e.b.Stop(ctx, provider.StopRequest{ID: v.ID}); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	if _, err := e.b.Status(ctx, provider.StatusRequest{ID: v.ID}); !errors.Is(err, provider.ErrNotFound) {
		t.Errorf("Status after Stop: %v, want ErrNotFound", err)
	}
	if err := e.b.Stop(ctx, provider.StopRequest{ID: v.ID}); err != nil {
		t.Errorf("second Stop: %v", err)
	}
	if err := e.b.Stop(ctx, provider.StopRequest{ID: "blue-crab"}); err != nil {
		t.Errorf("Stop by slug of a gone lease: %v", err)
	}
	if names := e.fake.Names(); len(names) != 0 {
		t.Errorf("left behind: %v", names)
	}
	wantEvents := []string{
		"create " + v.CloudID,
		"write " + dir + "/bin/hello.sh", "write " + dir + "/note.txt",
		"cmd " + v.CloudID + " sh", "cmd " + v.CloudID + " sh",
		"extend " + v.CloudID + " by 600000ms",
		"stop " + v.CloudID, "delete " + v.CloudID,
	}
	if diff := cmp.Diff(wantEvents, e.fake.Events()); diff != "" {
		t.Errorf("API mutations (-want +got):\n%s", diff)
	}
	if !e.fake.created[v.CloudID].nonPersistent {
		t.Errorf("sandbox created persistent; want persistent false (no snapshots left behind)")
	}
	checkNoToken(t, "log", e.log.String())
}

func TestRunStreamsOutput(t *testing.T) {
	e := newEnv(t)
	v := e.warmup("stream", nil)
	cwd := filepath.Join(e.fake.dir, v.CloudID)
	stdout := newSignalWriter("first\n")
	type result struct {
		res provider.DelegatedRunResult
		err error
	}
	done := make(chan result, 1)
	go func() {
		res, err := e.b.Run(context.Background(), provider.DelegatedRunRequest{
			LeaseID: v.ID, Command: []string{"sh", "-c", "echo first; while [ ! -e go ]; do sleep 0.01; done; echo second >&2; exit 7"},
			Stdout: stdout, Stderr: io.Discard,
		})
		done <- result{res, err}
	}()
	<-stdout.seen // the first line arrives while the command still runs
	if err := os.WriteFile(filepath.Join(cwd, "go"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	r := <-done
	if r.err != nil || r.res.ExitCode != 7 || stdout.String() != "first\n" {
		t.Errorf("Run = %v, %v, stdout %q; want exit 7, first", r.res, r.err, stdout.String())
	}
}

func TestRunExitCodes(t *testing.T) {
	e := newEnv(t)
	v := e.warmup("exits", nil)
	for _, tc := range []struct {
		name string
		cmd  []string
		want int
	}{
		{"success", []string{"true"}, 0},
		{"failure", []string{"sh", "-c", "exit 42"}, 42},
		{"signal", []string{"sh", "-c", "kill -TERM $$"}, 128 + 15},
		{"no such program", []string{"no-such-program-crabbox"}, 127},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, _, _, err := e.run(context.Background(), v.ID, "", tc.cmd...)
			if err != nil || code != tc.want {
				t.Errorf("Run(%q) = %d, %v; want %d", tc.cmd, code, err, tc.want)
			}
		})
	}
}

func TestRunCancelKillsCommand(t *testing.T) {
	for _, tc := range []struct {
		name, script string
		signals      []string
	}{
		{"SIGTERM", "echo started; sleep 600", []string{"15"}},
		{"SIGKILL after the grace", "trap '' TERM; echo started; sleep 600", []string{"15", "9"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			e.b = e.backend(vercel.Config{KillGrace: 200 * time.Millisecond})
			v := e.warmup("cancel", nil)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			stdout := newSignalWriter("started")
			go func() {
				<-stdout.seen
				cancel()
			}()
			_, err := e.b.Run(ctx, provider.DelegatedRunRequest{LeaseID: v.ID, Command: []string{"sh", "-c", tc.script}, Stdout: stdout})
			if !errors.Is(err, context.Canceled) {
				t.Errorf("Run after cancel: %v, want context.Canceled", err)
			}
			if running := e.fake.Running(); len(running) != 0 {
				t.Errorf("still running after Run returned: %v", running)
			}
			var kills []string
			for _, ev := range e.fake.Events() {
				if f := strings.Fields(ev); f[0] == "kill" {
					kills = append(kills, f[2])
				}
			}
			if diff := cmp.Diff(tc.signals, kills); diff != "" {
				t.Errorf("signals sent (-want +got):\n%s", diff)
			}
		})
	}
}

func TestRunRejects(t *testing.T) {
	e := newEnv(t)
	v := e.warmup("rejects", nil)
	for _, tc := range []struct {
		name string
		req  provider.DelegatedRunRequest
		want string
	}{
		{"no command", provider.DelegatedRunRequest{LeaseID: v.ID}, "no command"},
		{"local root", provider.DelegatedRunRequest{LeaseID: v.ID, Command: []string{"true"}, Root: "/src"}, "file API"},
		{"relative dir", provider.DelegatedRunRequest{LeaseID: v.ID, Command: []string{"true"}, Dir: "repo"}, "not absolute"},
		{"unclean dir", provider.DelegatedRunRequest{LeaseID: v.ID, Command: []string{"true"}, Dir: "/work/../etc"}, "not clean"},
		{"unknown lease", provider.DelegatedRunRequest{LeaseID: "cbx_000000000000", Command: []string{"true"}}, "not found"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := e.b.Run(context.Background(), tc.req); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Run: %v, want an error containing %q", err, tc.want)
			}
		})
	}
	for _, p := range []string{"relative", "/a/../b", "/"} {
		if err := e.b.WriteFile(context.Background(), provider.WriteFileRequest{LeaseID: v.ID, Path: p, Body: strings.NewReader(""), Size: 0}); err == nil {
			t.Errorf("WriteFile(%q) succeeded", p)
		}
	}
	if err := e.b.WriteFile(context.Background(), provider.WriteFileRequest{LeaseID: v.ID, Path: v.WorkRoot + "/short", Body: strings.NewReader("ab"), Size: 5}); err == nil || !strings.Contains(err.Error(), "not the 5 announced") {
		t.Errorf("WriteFile of a body shorter than its size: %v, want an error about the body", err)
	}
	if got := e.fake.Events(); len(got) != 1 {
		t.Errorf("rejected calls reached the API: %v", got)
	}
}

// A session that reaches its timeout ends by itself: the lease is gone
// for Status, List, Run and Touch, and Stop still deletes the sandbox.
func TestSelfExpiry(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	v := e.warmup("expiring", nil)
	e.clock.Advance(31 * time.Minute)
	if _, err := e.b.Status(ctx, provider.StatusRequest{ID: v.ID}); !errors.Is(err, provider.ErrNotFound) {
		t.Errorf("Status after the timeout: %v, want ErrNotFound", err)
	}
	if _, _, _, err := e.run(ctx, v.ID, "", "true"); !errors.Is(err, provider.ErrNotFound) {
		t.Errorf("Run after the timeout: %v, want ErrNotFound", err)
	}
	if _, err := e.b.Touch(ctx, provider.DelegatedTouchRequest{ID: v.ID, ExpiresAt: e.clock.Now().Add(time.Hour)}); !errors.Is(err, provider.ErrNotFound) {
		t.Errorf("Touch after the timeout: %v, want ErrNotFound", err)
	}
	if list, err := e.b.List(ctx, provider.ListRequest{}); err != nil || len(list) != 0 {
		t.Errorf("List after the timeout = %v, %v; want nothing", list, err)
	}
	if err := e.b.Stop(ctx, provider.StopRequest{ID: v.ID}); err != nil {
		t.Fatal(err)
	}
	if names := e.fake.Names(); len(names) != 0 {
		t.Errorf("left behind: %v", names)
	}
}

func TestListPages(t *testing.T) {
	e := newEnv(t)
	for range 105 {
		e.fake.addOwned(time.Hour)
	}
	e.fake.addForeign("my-app", map[string]string{"crabbox": "true"}, time.Hour)
	e.fake.addForeign("crabbox-cbx-0123456789ab", map[string]string{"crabbox": "true", "lease": "cbx_ffffffffffff"}, time.Hour)
	list, err := e.b.List(context.Background(), provider.ListRequest{})
	if err != nil || len(list) != 105 {
		t.Errorf("List = %d leases, %v; want the 105 crabbox made", len(list), err)
	}
}

func TestDoctor(t *testing.T) {
	e := newEnv(t)
	checks, err := e.b.Doctor(context.Background())
	if err != nil || len(checks) != 1 || !checks[0].OK || !strings.Contains(checks[0].Detail, testProject) {
		t.Errorf("Doctor = %+v, %v; want the API check passing for %s", checks, err, testProject)
	}
	bad := e.backend(vercel.Config{Token: "not-the-token"})
	checks, err = bad.Doctor(context.Background())
	if err != nil || len(checks) != 1 || checks[0].OK || !strings.Contains(checks[0].Detail, "403") {
		t.Errorf("Doctor with a rejected token = %+v, %v; want a failed check naming 403", checks, err)
	}
	checkNoToken(t, "doctor detail", checks[0].Detail)
	if _, err := bad.List(context.Background(), provider.ListRequest{}); !errors.Is(err, provider.ErrUnauthenticated) {
		t.Errorf("List with a rejected token: %v, want ErrUnauthenticated", err)
	}
	if got := e.fake.Events(); len(got) != 0 {
		t.Errorf("Doctor changed something: %v", got)
	}
}
