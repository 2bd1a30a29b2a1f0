package sync

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

func gitCmd(t *testing.T, dir string, args ...string) string {
	t.Helper()
	out, err := exec.Command("git", append([]string{"-C", dir}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("git %v: %v\n%s", args, err, out)
	}
	return strings.TrimSpace(string(out))
}

// gitTop agrees with git rev-parse --show-toplevel where it answers, and
// leaves to git what it cannot tell.
func TestGitTop(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("gitTop always leaves the answer to git on Windows")
	}
	base, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	repo := filepath.Join(base, "repo")
	mkdirs := func(dirs ...string) {
		for _, d := range dirs {
			if err := os.MkdirAll(d, 0o755); err != nil {
				t.Fatal(err)
			}
		}
	}
	mkdirs(filepath.Join(repo, "a", "b"), filepath.Join(repo, "vendor", "inner", "x"), filepath.Join(base, "plain"))
	gitCmd(t, repo, "init", "-q")
	gitCmd(t, filepath.Join(repo, "vendor", "inner"), "init", "-q")
	if err := os.WriteFile(filepath.Join(repo, "f"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	gitCmd(t, repo, "add", "f")
	gitCmd(t, repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "x")
	worktree := filepath.Join(base, "wt")
	gitCmd(t, repo, "worktree", "add", "-q", worktree)

	for _, dir := range []string{repo, filepath.Join(repo, "a", "b"), filepath.Join(repo, "vendor", "inner", "x")} {
		top, ok := gitTop(dir)
		if !ok {
			t.Errorf("gitTop(%s) left it to git", dir)
			continue
		}
		if want := gitCmd(t, dir, "rev-parse", "--show-toplevel"); top != want {
			t.Errorf("gitTop(%s) = %s, git says %s", dir, top, want)
		}
	}
	for _, dir := range []string{worktree, filepath.Join(repo, ".git"), filepath.Join(repo, ".git", "refs"), filepath.Join(base, "plain")} {
		if top, ok := gitTop(dir); ok {
			t.Errorf("gitTop(%s) = %s, want it left to git", dir, top)
		}
	}

	t.Run("environment", func(t *testing.T) {
		t.Setenv("GIT_DIR", filepath.Join(repo, ".git"))
		if top, ok := gitTop(repo); ok {
			t.Errorf("with GIT_DIR, gitTop = %s, want it left to git", top)
		}
	})
	t.Run("core.worktree", func(t *testing.T) {
		gitCmd(t, repo, "config", "core.worktree", filepath.Join(repo, "a"))
		defer gitCmd(t, repo, "config", "--unset", "core.worktree")
		if top, ok := gitTop(filepath.Join(repo, "a", "b")); ok {
			t.Errorf("with core.worktree, gitTop = %s, want it left to git", top)
		}
	})
	t.Run("core.bare", func(t *testing.T) {
		for _, value := range []string{"true", "yes", "1"} {
			gitCmd(t, repo, "config", "core.bare", value)
			if top, ok := gitTop(filepath.Join(repo, "a")); ok {
				t.Errorf("with core.bare %s, gitTop = %s, want it left to git", value, top)
			}
		}
		gitCmd(t, repo, "config", "core.bare", "false")
		if top, ok := gitTop(filepath.Join(repo, "a")); !ok || top != repo {
			t.Errorf("with core.bare false, gitTop = %s, %v, want %s", top, ok, repo)
		}
	})
	t.Run("no HEAD", func(t *testing.T) {
		fake := filepath.Join(repo, "a", ".git")
		mkdirs(fake)
		defer os.RemoveAll(fake)
		if top, ok := gitTop(filepath.Join(repo, "a", "b")); ok {
			t.Errorf("below a .git without HEAD, gitTop = %s, want it left to git", top)
		}
	})
}
