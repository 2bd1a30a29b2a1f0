package sync

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// gitTop finds the top of the git work tree holding dir (absolute, with no
// symlinks) as git does in the plain case, without starting git: the
// nearest directory, dir or above, with a .git directory of its own user
// that has a HEAD. It reports false wherever git might see it otherwise,
// and then git decides: a .git file (a linked worktree, a submodule), a
// repository owned by another user (safe.directory), a config that sets
// core.worktree or core.bare, dir inside a .git directory, a file system
// boundary on the way up, the environment variables that move git's
// directories or bound its search, no .git at all.
func gitTop(dir string) (string, bool) {
	for _, v := range []string{"GIT_DIR", "GIT_WORK_TREE", "GIT_COMMON_DIR", "GIT_CEILING_DIRECTORIES", "GIT_DISCOVERY_ACROSS_FILESYSTEM"} {
		if _, set := os.LookupEnv(v); set {
			return "", false
		}
	}
	start, err := os.Stat(dir)
	if err != nil {
		return "", false
	}
	for d := dir; ; {
		if filepath.Base(d) == ".git" {
			return "", false
		}
		fi, err := os.Lstat(filepath.Join(d, ".git"))
		switch {
		case err == nil && fi.IsDir():
			return d, plainRepository(d, fi)
		case err == nil, !errors.Is(err, fs.ErrNotExist):
			return "", false
		}
		parent := filepath.Dir(d)
		if parent == d {
			return "", false
		}
		pfi, err := os.Stat(parent)
		if err != nil || !sameDevice(start, pfi) {
			return "", false
		}
		d = parent
	}
}

// plainRepository reports whether top/.git (described by gitDir) is a
// repository git uses as is for the work tree top: its user's, with a
// HEAD, and no core.worktree or core.bare in its config.
func plainRepository(top string, gitDir fs.FileInfo) bool {
	if !ownedByMe(gitDir) {
		return false
	}
	if fi, err := os.Stat(filepath.Join(top, ".git", "HEAD")); err != nil || !fi.Mode().IsRegular() {
		return false
	}
	config, err := os.ReadFile(filepath.Join(top, ".git", "config"))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return false
	}
	return !movesWorkTree(config)
}

// movesWorkTree reports whether a repository's config may make git see
// the work tree elsewhere than above .git: any mention of a worktree
// (core.worktree, extensions.worktreeConfig), or core.bare set to anything
// but false (a bare "bare" line is true, as are yes, on and 1).
func movesWorkTree(config []byte) bool {
	for line := range strings.Lines(strings.ToLower(string(config))) {
		key, value, _ := strings.Cut(line, "=")
		key, value = strings.TrimSpace(key), strings.TrimSpace(value)
		switch {
		case strings.Contains(key, "worktree"):
			return true
		case key == "bare" && value != "false" && value != "no" && value != "off" && value != "0":
			return true
		}
	}
	return false
}
