package crabbox_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/crabbox-dev/crabbox"
)

// namedRepo makes a git checkout named name under parent holding which.txt
// with the given content.
func namedRepo(t *testing.T, parent, name, which string) string {
	t.Helper()
	dir := filepath.Join(parent, name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "which.txt"), []byte(which+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	git(t, dir, "init", "-q")
	return dir
}

func git(t *testing.T, dir string, args ...string) {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("git %v: %v\n%s", args, err, out)
	}
}

// runOut runs shell on the lease from root and returns its output.
func runOut(t *testing.T, c *crabbox.Client, req crabbox.RunRequest) (crabbox.RunResult, string) {
	t.Helper()
	var out bytes.Buffer
	req.Stdout, req.Stderr = &out, &out
	res, err := c.Run(context.Background(), req)
	if err != nil {
		t.Fatalf("Run from %s: %v", req.Root, err)
	}
	return res, out.String()
}

// Two checkouts with the same directory name get their own workdirs on
// one lease, and each runs on its own tree; one checkout always gets the
// same workdir, however its path is spelled.
func TestSameNamedCheckoutsGetTheirOwnWorkdirs(t *testing.T) {
	c := newClient(t, t.TempDir())
	ctx := context.Background()
	box, err := c.Acquire(ctx, crabbox.AcquireOptions{Keep: true})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Stop(ctx, box.ID())
	defer box.Close()

	parents := t.TempDir()
	a := namedRepo(t, filepath.Join(parents, "one"), "app", "a")
	b := namedRepo(t, filepath.Join(parents, "two"), "app", "b")
	wa, wb := box.Workdir(a), box.Workdir(b)
	if wa == wb {
		t.Fatalf("both checkouts named app get workdir %s", wa)
	}
	for _, wd := range []string{wa, wb} {
		if dir, name := filepath.Dir(wd), filepath.Base(wd); dir != filepath.Join(box.Target().WorkRoot, box.ID()) || !strings.HasPrefix(name, "app-") || len(name) != len("app-")+8 {
			t.Errorf("workdir %s, want <workRoot>/%s/app-<8 hex>", wd, box.ID())
		}
	}
	link := filepath.Join(t.TempDir(), "link")
	if err := os.Symlink(a, link); err != nil {
		t.Fatal(err)
	}
	for _, same := range []string{a + string(filepath.Separator) + ".", link} {
		if got := box.Workdir(same); got != wa {
			t.Errorf("Workdir(%s) = %s, want %s as for %s", same, got, wa, a)
		}
	}

	for i, want := range []struct{ root, which, workdir string }{
		{a, "a", wa}, {b, "b", wb}, {a, "a", wa}, {b, "b", wb},
	} {
		res, out := runOut(t, c, crabbox.RunRequest{Lease: box.ID(), Root: want.root, Shell: "cat which.txt; pwd"})
		if diff := cmp.Diff(want.which+"\n"+want.workdir+"\n", out); diff != "" || res.ExitCode != 0 {
			t.Errorf("run %d from %s (exit %d): output (-want +got):\n%s", i, want.root, res.ExitCode, diff)
		}
	}

	// Lease.Sync puts a checkout where a run from it looks.
	if err := os.WriteFile(filepath.Join(a, "which.txt"), []byte("a, synced\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := box.Sync(ctx, a, crabbox.SyncOptions{}); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(filepath.Join(wa, "which.txt")) // the local box's work root is on this machine
	if err != nil || string(got) != "a, synced\n" {
		t.Errorf("after Sync, %s/which.txt = %q (%v), want the synced content", wa, got, err)
	}
	if got, err := os.ReadFile(filepath.Join(wb, "which.txt")); err != nil || string(got) != "b\n" {
		t.Errorf("the other checkout's tree changed: which.txt = %q (%v)", got, err)
	}
}

// Outside a git checkout a run refuses before anything happens: no lease,
// no history, nothing sent. A plain directory named on purpose (PlainDir)
// is synced, and NoSync runs without syncing.
func TestRunOutsideCheckoutUploadsNothing(t *testing.T) {
	state := t.TempDir()
	c := newClient(t, state)
	plain := t.TempDir()
	if err := os.WriteFile(filepath.Join(plain, "secret.txt"), []byte("plain\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := c.Run(context.Background(), crabbox.RunRequest{Root: plain, RecordHistory: true, Shell: "cat secret.txt"})
	if !errors.Is(err, crabbox.ErrNotCheckout) || !strings.Contains(err.Error(), plain) {
		t.Fatalf("Run outside a checkout: err = %v, want ErrNotCheckout naming %s", err, plain)
	}
	noLeases(t, c)
	if entries, err := c.History().List(0); err != nil || len(entries) != 0 {
		t.Errorf("history after a refused run: %+v (%v), want none", entries, err)
	}
	if _, err := os.Stat(filepath.Join(state, "local")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the local provider's work root exists after a refused run (err %v)", err)
	}
	if _, err := crabbox.PlanSync(context.Background(), crabbox.SyncPlanRequest{Dir: plain, StateDir: state}); !errors.Is(err, crabbox.ErrNotCheckout) {
		t.Errorf("PlanSync outside a checkout: err = %v, want ErrNotCheckout", err)
	}

	res, out := runOut(t, c, crabbox.RunRequest{Root: plain, PlainDir: true, Shell: "cat secret.txt"})
	if out != "plain\n" || res.ExitCode != 0 || res.Sync.Sent != 1 {
		t.Errorf("PlainDir run: output %q, exit %d, sent %d; want the file, 0, 1", out, res.ExitCode, res.Sync.Sent)
	}
	plan, err := crabbox.PlanSync(context.Background(), crabbox.SyncPlanRequest{Dir: plain, PlainDir: true, StateDir: state})
	if err != nil || plan.Files != 1 {
		t.Errorf("PlanSync of a plain directory: %+v, %v; want 1 file", plan, err)
	}
	res, out = runOut(t, c, crabbox.RunRequest{Root: plain, NoSync: true, Shell: "ls -A | wc -l"})
	if strings.TrimSpace(out) != "0" || res.ExitCode != 0 || !res.SyncSkipped {
		t.Errorf("NoSync run: output %q, exit %d, skipped %v; want an empty workdir", out, res.ExitCode, res.SyncSkipped)
	}
	noLeases(t, c)
}

// A home directory, a directory holding one, a file system root and
// crabbox's state directory (or one holding it) are never synced, even
// named on purpose or inside a git checkout.
func TestHomeAndStateDirAreNeverSynced(t *testing.T) {
	base := t.TempDir()
	home := filepath.Join(base, "home", "user")
	project := filepath.Join(home, "project")
	if err := os.MkdirAll(project, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("HOME", home)
	t.Setenv("USERPROFILE", home) // os.UserHomeDir on Windows
	dotfiles := t.TempDir()       // a home directory kept in git
	git(t, dotfiles, "init", "-q")
	state := filepath.Join(base, "work", "state")
	inRepo := namedRepo(t, base, "repo", "r")

	for _, tc := range []struct {
		name  string
		state string
		req   crabbox.RunRequest
	}{
		{"home", state, crabbox.RunRequest{Root: home, PlainDir: true}},
		{"above home", state, crabbox.RunRequest{Root: filepath.Dir(home), PlainDir: true}},
		{"root", state, crabbox.RunRequest{Root: string(filepath.Separator), PlainDir: true}},
		{"state", state, crabbox.RunRequest{Root: state, PlainDir: true}},
		{"above state", state, crabbox.RunRequest{Root: filepath.Dir(state), PlainDir: true}},
		{"checkout holding state", filepath.Join(inRepo, ".crabbox-state"), crabbox.RunRequest{Root: inRepo}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newClient(t, tc.state)
			tc.req.Shell = "true"
			_, err := c.Run(context.Background(), tc.req)
			if !errors.Is(err, crabbox.ErrUnsafeSyncDir) {
				t.Fatalf("Run from %s: err = %v, want ErrUnsafeSyncDir", tc.req.Root, err)
			}
			noLeases(t, c)
			_, err = crabbox.PlanSync(context.Background(), crabbox.SyncPlanRequest{Dir: tc.req.Root, PlainDir: tc.req.PlainDir, StateDir: tc.state})
			if !errors.Is(err, crabbox.ErrUnsafeSyncDir) {
				t.Errorf("PlanSync of %s: err = %v, want ErrUnsafeSyncDir", tc.req.Root, err)
			}
		})
	}

	// A home kept in git is still a home directory.
	t.Setenv("HOME", dotfiles)
	t.Setenv("USERPROFILE", dotfiles)
	c := newClient(t, state)
	if _, err := c.Run(context.Background(), crabbox.RunRequest{Root: dotfiles, Shell: "true"}); !errors.Is(err, crabbox.ErrUnsafeSyncDir) || !strings.Contains(err.Error(), "home directory") {
		t.Errorf("Run from a home kept in git: err = %v, want ErrUnsafeSyncDir naming the home directory", err)
	}
	t.Setenv("HOME", home)
	t.Setenv("USERPROFILE", home)

	// Lease.Sync refuses them too; a directory inside home is fine.
	ctx := context.Background()
	box, err := c.Acquire(ctx, crabbox.AcquireOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer box.Release(ctx)
	for _, dir := range []string{home, state} {
		if _, err := box.Sync(ctx, dir, crabbox.SyncOptions{}); !errors.Is(err, crabbox.ErrUnsafeSyncDir) {
			t.Errorf("Lease.Sync(%s): err = %v, want ErrUnsafeSyncDir", dir, err)
		}
	}
	if _, err := box.Sync(ctx, project, crabbox.SyncOptions{}); err != nil {
		t.Errorf("Lease.Sync of a directory in home: %v", err)
	}
}
