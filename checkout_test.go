package crabbox_test

import (
	"bytes"
	"context"
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
