package crabboxtest

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/crabbox-dev/crabbox"
	"github.com/crabbox-dev/crabbox/lease"
)

// inState keeps a box's lease records in state, where the test can look.
func inState(state string) Option {
	return WithClientOptions(crabbox.WithStateDir(state))
}

// leftovers are what the leases in state left behind: their claims in
// the lease store and their directories at the local provider.
func leftovers(t *testing.T, state string) []string {
	t.Helper()
	store, err := lease.OpenStore(state)
	if err != nil {
		t.Fatal(err)
	}
	claims, err := store.List()
	if err != nil {
		t.Fatal(err)
	}
	var left []string
	for _, c := range claims {
		left = append(left, "claim "+c.ID)
	}
	des, err := os.ReadDir(filepath.Join(state, "local"))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		t.Fatal(err)
	}
	for _, de := range des {
		left = append(left, "local box "+de.Name())
	}
	return left
}

// gitRepo makes a git checkout holding the given files.
func gitRepo(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	if out, err := exec.Command("git", "-C", dir, "init", "-q").CombinedOutput(); err != nil {
		t.Fatalf("git init: %v\n%s", err, out)
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func TestBoxSyncsTheCheckoutOfTheWorkingDirectory(t *testing.T) {
	box := Box(t)
	if got := Run(t, box, "ls"); !strings.Contains(got, "box_test.go") {
		t.Errorf("ls in the box's copy of the package directory = %q, want box_test.go listed", got)
	}
	got := Run(t, box, "head", "-n", "1", "../go.mod")
	if diff := cmp.Diff("module github.com/crabbox-dev/crabbox\n", got); diff != "" {
		t.Errorf("the whole checkout is not on the box: ../go.mod (-want +got):\n%s", diff)
	}
}

func TestBoxSyncsTheGivenDirectory(t *testing.T) {
	repo := gitRepo(t, map[string]string{"hello.txt": "hello from the repo\n"})
	box := Box(t, WithSyncDir(repo))
	var out strings.Builder
	res, err := box.Run(t.Context(), crabbox.RunRequest{
		Root: repo, NoSync: true, Command: []string{"cat", "hello.txt"}, Stdout: &out,
	})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]any{0, "hello from the repo\n"}, []any{res.ExitCode, out.String()}); diff != "" {
		t.Errorf("cat hello.txt: exit code and output (-want +got):\n%s", diff)
	}
}

// Run runs in the box's copy of the directory synced to it, whoever synced
// it, and not in the box's (never synced) copy of the test's working
// directory.
func TestRunRunsInTheSyncedDirectory(t *testing.T) {
	repo := gitRepo(t, map[string]string{"only-in-repo.txt": "from the synced repo\n"})
	sub := filepath.Join(repo, "sub")
	if err := os.Mkdir(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(sub, "only-in-sub.txt"), []byte("from sub\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	plain := t.TempDir()
	if err := os.WriteFile(filepath.Join(plain, "only-in-plain.txt"), []byte("from a plain directory\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	started := func(t *testing.T, opts ...Option) *crabbox.Lease {
		box, stop, err := Start(t.Context(), opts...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if err := stop(); err != nil {
				t.Error(err)
			}
		})
		return box
	}
	tests := []struct {
		name string
		box  func(t *testing.T) *crabbox.Lease
		argv []string
		want string
	}{
		{"Box WithSyncDir", func(t *testing.T) *crabbox.Lease { return Box(t, WithSyncDir(repo)) },
			[]string{"cat", "only-in-repo.txt"}, "from the synced repo\n"},
		{"Box WithSyncDir of a subdirectory", func(t *testing.T) *crabbox.Lease { return Box(t, WithSyncDir(sub)) },
			[]string{"cat", "only-in-sub.txt", "../only-in-repo.txt"}, "from sub\nfrom the synced repo\n"},
		{"Box WithSyncDir of a plain directory", func(t *testing.T) *crabbox.Lease { return Box(t, WithSyncDir(plain)) },
			[]string{"cat", "only-in-plain.txt"}, "from a plain directory\n"},
		{"Start WithSyncDir", func(t *testing.T) *crabbox.Lease { return started(t, WithSyncDir(repo)) },
			[]string{"cat", "only-in-repo.txt"}, "from the synced repo\n"},
		{"box.Sync after WithoutSync", func(t *testing.T) *crabbox.Lease {
			box := Box(t, WithoutSync())
			if _, err := box.Sync(t.Context(), repo, crabbox.SyncOptions{}); err != nil {
				t.Fatal(err)
			}
			return box
		}, []string{"cat", "only-in-repo.txt"}, "from the synced repo\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			box := tt.box(t)
			if diff := cmp.Diff(tt.want, Run(t, box, tt.argv...)); diff != "" {
				t.Errorf("Run(%q) (-want +got):\n%s", tt.argv, diff)
			}
		})
	}
}

func TestBoxWithoutSyncStartsEmpty(t *testing.T) {
	box := Box(t, WithoutSync())
	if diff := cmp.Diff("", Run(t, box, "ls", "-A")); diff != "" {
		t.Errorf("ls -A on a box that was not synced (-want +got):\n%s", diff)
	}
}

func TestBoxIsReleasedWhenTheTestEnds(t *testing.T) {
	// The test may end the handle itself: the lease is released all the
	// same, and the cleanup does not fail the test.
	for _, end := range []string{"nobody", "Close", "Release"} {
		t.Run("handle ended by "+end, func(t *testing.T) {
			state := t.TempDir()
			t.Run("test", func(t *testing.T) {
				box := Box(t, inState(state), WithoutSync())
				want := []string{"claim " + box.ID(), "local box " + box.ID()}
				if diff := cmp.Diff(want, leftovers(t, state)); diff != "" {
					t.Errorf("while the test runs (-want +got):\n%s", diff)
				}
				switch end {
				case "Close":
					box.Close()
				case "Release":
					box.Release(t.Context())
				}
			})
			if diff := cmp.Diff([]string(nil), leftovers(t, state)); diff != "" {
				t.Errorf("after the test (-want +got):\n%s", diff)
			}
		})
	}
}

func TestRunExitCode(t *testing.T) {
	box := Box(t, WithoutSync())
	tests := []struct {
		argv     []string
		wantOut  string
		wantExit int
	}{
		{[]string{"true"}, "", 0},
		{[]string{"echo", "a b"}, "a b\n", 0},
		{[]string{"sh", "-c", "echo out; echo err >&2; exit 3"}, "out\n", 3},
		{[]string{"crabbox-no-such-command"}, "", 127},
	}
	for _, tt := range tests {
		t.Run(tt.argv[0], func(t *testing.T) {
			out, exit := RunExitCode(t, box, tt.argv...)
			if diff := cmp.Diff([]any{tt.wantOut, tt.wantExit}, []any{out, exit}); diff != "" {
				t.Errorf("RunExitCode(%q): stdout and exit code (-want +got):\n%s", tt.argv, diff)
			}
		})
	}
}

// TestCrabboxErrorsFailTheTest runs the helpers with a fake test, which
// records how they fail it.
func TestCrabboxErrorsFailTheTest(t *testing.T) {
	box := Box(t, WithoutSync())
	released := Box(t, WithoutSync())
	if err := released.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		body func(t testing.TB)
		want []string // in the one Fatal message
	}{
		{
			name: "unknown provider",
			body: func(t testing.TB) { Box(t, WithClientOptions(crabbox.WithProvider("no-such-provider"))) },
			want: []string{"crabboxtest: ", `"no-such-provider"`},
		},
		{
			name: "sync of a missing directory",
			body: func(t testing.TB) { Box(t, WithSyncDir(filepath.Join(t.TempDir(), "missing"))) },
			want: []string{"crabboxtest: sync: ", "missing"},
		},
		{
			name: "run on a released box",
			body: func(t testing.TB) { Run(t, released, "true") },
			want: []string{"crabboxtest: run true: ", released.ID()},
		},
		{
			name: "run exit code on a released box",
			body: func(t testing.TB) { RunExitCode(t, released, "true") },
			want: []string{"crabboxtest: run true: ", released.ID()},
		},
		{
			name: "run without a box",
			body: func(t testing.TB) { Run(t, nil, "true") },
			want: []string{"crabboxtest: run true: no box"},
		},
		{
			name: "non-zero exit",
			body: func(t testing.TB) { Run(t, box, "sh", "-c", "echo out; echo err >&2; exit 3") },
			want: []string{"sh -c 'echo out; echo err >&2; exit 3' exited 3", "stdout:\nout", "stderr:\nerr"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFakeT(t)
			f.do(tt.body)
			fatal, errs := f.failures()
			if len(fatal) != 1 || len(errs) != 0 {
				t.Fatalf("failures: Fatal %q, Error %q; want one Fatal", fatal, errs)
			}
			for _, w := range tt.want {
				if !strings.Contains(fatal[0], w) {
					t.Errorf("Fatal message %q does not say %q", fatal[0], w)
				}
			}
		})
	}
}

func TestBoxThatFailsToSyncLeavesNothing(t *testing.T) {
	state := t.TempDir()
	f := newFakeT(t)
	f.do(func(t testing.TB) { Box(t, inState(state), WithSyncDir(filepath.Join(state, "missing"))) })
	if fatal, _ := f.failures(); len(fatal) != 1 {
		t.Fatalf("Fatal messages %q, want one", fatal)
	}
	if diff := cmp.Diff([]string(nil), leftovers(t, state)); diff != "" {
		t.Errorf("after the failed Box (-want +got):\n%s", diff)
	}
}
