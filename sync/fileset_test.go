package sync

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// git runs git in dir with a fixed identity.
func git(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(),
		"GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@example.com",
		"GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@example.com")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

func needGit(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git not installed")
	}
}

func write(t *testing.T, root, p string, data string, mode fs.FileMode) {
	t.Helper()
	name := filepath.Join(root, filepath.FromSlash(p))
	if err := os.MkdirAll(filepath.Dir(name), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(name, []byte(data), mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(name, mode); err != nil { // despite the umask
		t.Fatal(err)
	}
}

func symlink(t *testing.T, root, p, target string) {
	t.Helper()
	name := filepath.Join(root, filepath.FromSlash(p))
	if err := os.MkdirAll(filepath.Dir(name), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(target, name); err != nil {
		t.Fatal(err)
	}
}

// checkout builds a git checkout with every kind of entry FileSet meets,
// and returns it with the file set it should have.
func checkout(t *testing.T) (string, []File) {
	t.Helper()
	needGit(t)
	root := t.TempDir()
	git(t, root, "init", "-q")
	write(t, root, ".gitignore", "*.log\nbuild/\n", 0o644)
	write(t, root, "committed.txt", "hello\n", 0o644)
	write(t, root, "bin/run.sh", "#!/bin/sh\necho hi\n", 0o755)
	write(t, root, "empty", "", 0o644)
	write(t, root, "a/b/c/deep.txt", "deep\n", 0o600)
	write(t, root, "with space/it's a file.txt", "spaces\n", 0o644)
	write(t, root, "gone.txt", "deleted from the work tree\n", 0o644)
	symlink(t, root, "link", "committed.txt")
	symlink(t, root, "a/up", "../bin")
	git(t, root, "add", "-A")
	git(t, root, "commit", "-qm", "init")
	if err := os.Remove(filepath.Join(root, "gone.txt")); err != nil {
		t.Fatal(err)
	}
	write(t, root, "untracked.txt", "new\n", 0o644)
	write(t, root, "debug.log", "ignored\n", 0o644)
	write(t, root, "build/out", "ignored\n", 0o644)
	// A nested repository is not part of the checkout.
	nested := filepath.Join(root, "nested")
	if err := os.Mkdir(nested, 0o755); err != nil {
		t.Fatal(err)
	}
	git(t, nested, "init", "-q")
	write(t, nested, "inner.txt", "inner\n", 0o644)

	want := []File{
		{Path: ".gitignore", Mode: 0o644, Size: 13},
		{Path: "a/b/c/deep.txt", Mode: 0o600, Size: 5},
		{Path: "a/up", Mode: fs.ModeSymlink | 0o777, LinkTarget: "../bin"},
		{Path: "bin/run.sh", Mode: 0o755, Size: 18},
		{Path: "committed.txt", Mode: 0o644, Size: 6},
		{Path: "empty", Mode: 0o644},
		{Path: "link", Mode: fs.ModeSymlink | 0o777, LinkTarget: "committed.txt"},
		{Path: "untracked.txt", Mode: 0o644, Size: 4},
		{Path: "with space/it's a file.txt", Mode: 0o644, Size: 7},
	}
	return root, want
}

func TestFileSetGit(t *testing.T) {
	root, want := checkout(t)
	got, err := FileSet(t.Context(), root)
	if err != nil {
		t.Fatalf("FileSet: %v", err)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("FileSet (-want +got):\n%s", diff)
	}
}

func TestFileSetSkipsSubmodule(t *testing.T) {
	needGit(t)
	root := t.TempDir()
	git(t, root, "init", "-q")
	write(t, root, "f", "x", 0o644)
	sub := filepath.Join(root, "sub")
	if err := os.Mkdir(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	git(t, sub, "init", "-q")
	write(t, sub, "inner", "x", 0o644)
	git(t, sub, "add", "inner")
	git(t, sub, "commit", "-qm", "x")
	git(t, root, "add", "f", "sub") // records sub as a gitlink
	got, err := FileSet(t.Context(), root)
	if err != nil {
		t.Fatalf("FileSet: %v", err)
	}
	if diff := cmp.Diff([]File{{Path: "f", Mode: 0o644, Size: 1}}, got); diff != "" {
		t.Errorf("FileSet (-want +got):\n%s", diff)
	}
}

func TestFileSetSubdirectoryOfCheckout(t *testing.T) {
	root, _ := checkout(t)
	write(t, root, "a/b/new.txt", "n", 0o644)
	if err := os.Remove(filepath.Join(root, "a/up")); err != nil {
		t.Fatal(err)
	}
	got, err := FileSet(t.Context(), filepath.Join(root, "a"))
	if err != nil {
		t.Fatalf("FileSet: %v", err)
	}
	want := []File{
		{Path: "b/c/deep.txt", Mode: 0o600, Size: 5},
		{Path: "b/new.txt", Mode: 0o644, Size: 1},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("FileSet (-want +got):\n%s", diff)
	}
}

func TestFileSetSubdirectoryRejectsLinkOut(t *testing.T) {
	// a/up -> ../bin stays in the checkout but leaves a/.
	root, _ := checkout(t)
	_, err := FileSetWith(t.Context(), filepath.Join(root, "a"), FileSetOptions{RefuseOutsideLinks: true})
	if err == nil || !strings.Contains(err.Error(), `"up"`) {
		t.Errorf("FileSet = %v, want an error naming %q", err, "up")
	}
}

func TestFileSetWalk(t *testing.T) {
	root := t.TempDir()
	t.Setenv("GIT_CEILING_DIRECTORIES", filepath.Dir(root))
	write(t, root, "x.txt", "x", 0o644)
	write(t, root, "tool", "#!/bin/sh\n", 0o755)
	write(t, root, "d/e/f", "", 0o644)
	write(t, root, "d/.git/config", "not a repository", 0o644)
	write(t, root, ".git/HEAD", "not a repository either", 0o644)
	symlink(t, root, "d/l", "../x.txt")
	got, err := FileSet(t.Context(), root)
	if err != nil {
		t.Fatalf("FileSet: %v", err)
	}
	want := []File{
		{Path: "d/e/f", Mode: 0o644},
		{Path: "d/l", Mode: fs.ModeSymlink | 0o777, LinkTarget: "../x.txt"},
		{Path: "tool", Mode: 0o755, Size: 10},
		{Path: "x.txt", Mode: 0o644, Size: 1},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("FileSet (-want +got):\n%s", diff)
	}
}

func TestFileSetRefusesOutsideLinks(t *testing.T) {
	tests := []struct {
		name   string
		link   string
		target string
	}{
		{"absolute", "abs", "/etc/passwd"},
		{"parent", "d/up", "../../outside"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root, _ := checkout(t)
			symlink(t, root, tt.link, tt.target)
			_, err := FileSetWith(t.Context(), root, FileSetOptions{RefuseOutsideLinks: true})
			if err == nil {
				t.Fatal("FileSet accepted an escaping symlink")
			}
			for _, s := range []string{tt.link, tt.target, root} {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error %q does not name %q", err, s)
				}
			}
		})
	}
}

func TestFileSetKeepsOutsideLinks(t *testing.T) {
	root, want := checkout(t)
	symlink(t, root, "abs", "/etc/passwd")
	symlink(t, root, "d/up", "../../outside")
	var warnings []string
	got, err := FileSetWith(t.Context(), root, FileSetOptions{Warn: func(s string) { warnings = append(warnings, s) }})
	if err != nil {
		t.Fatalf("FileSetWith: %v", err)
	}
	want = append(want,
		File{Path: "abs", Mode: fs.ModeSymlink | 0o777, LinkTarget: "/etc/passwd"},
		File{Path: "d/up", Mode: fs.ModeSymlink | 0o777, LinkTarget: "../../outside"})
	slices.SortFunc(want, func(a, b File) int { return strings.Compare(a.Path, b.Path) })
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("FileSetWith (-want +got):\n%s", diff)
	}
	if len(warnings) != 1 {
		t.Fatalf("warnings = %q, want one", warnings)
	}
	for _, s := range []string{`"abs" -> "/etc/passwd"`, `"d/up" -> "../../outside"`, "synced as links"} {
		if !strings.Contains(warnings[0], s) {
			t.Errorf("warning %q does not say %q", warnings[0], s)
		}
	}
	// Without a Warn callback the listing succeeds just the same.
	if _, err := FileSet(t.Context(), root); err != nil {
		t.Errorf("FileSet: %v", err)
	}
}

func TestOutsideWarning(t *testing.T) {
	one := []File{{Path: "l", LinkTarget: "/x"}}
	if got, want := outsideWarning(one), `symlink "l" points to "/x", outside the directory being synced: it is synced as a link, and nothing it points to is sent`; got != want {
		t.Errorf("outsideWarning = %q, want %q", got, want)
	}
	var many []File
	for i := range 7 {
		many = append(many, File{Path: fmt.Sprint("l", i), LinkTarget: "/x"})
	}
	got := outsideWarning(many)
	if !strings.HasPrefix(got, "7 symlinks point outside") || !strings.Contains(got, `"l4" -> "/x", and 2 more)`) || strings.Contains(got, `"l5"`) {
		t.Errorf("outsideWarning = %q", got)
	}
}

// withSubmodule makes a checkout holding an initialised submodule at
// lib/sub (a clone of a repository of its own) and an uninitialised one
// at lib/empty, and returns the checkout and the submodule's work tree.
func withSubmodule(t *testing.T) (root, sub string) {
	t.Helper()
	needGit(t)
	base := t.TempDir()
	origin := filepath.Join(base, "origin")
	root = filepath.Join(base, "top")
	for _, d := range []string{origin, root} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
		git(t, d, "init", "-q")
	}
	write(t, origin, "a.txt", "a\n", 0o644)
	write(t, origin, "d/tool", "#!/bin/sh\n", 0o755)
	write(t, origin, ".gitignore", "*.o\n", 0o644)
	git(t, origin, "add", "-A")
	git(t, origin, "commit", "-qm", "sub")
	write(t, root, "top.txt", "top\n", 0o644)
	git(t, root, "-c", "protocol.file.allow=always", "submodule", "add", "-q", origin, "lib/sub")
	git(t, root, "-c", "protocol.file.allow=always", "submodule", "add", "-q", origin, "lib/empty")
	git(t, root, "add", "-A")
	git(t, root, "commit", "-qm", "top")
	git(t, root, "submodule", "deinit", "-q", "lib/empty")
	return root, filepath.Join(root, "lib", "sub")
}

func TestFileSetSubmodules(t *testing.T) {
	root, sub := withSubmodule(t)
	write(t, sub, "junk.o", "ignored by the submodule\n", 0o644)
	write(t, sub, "notes.txt", "untracked in the submodule\n", 0o644)
	write(t, sub, "node_modules/x.js", "left out by the built-in excludes\n", 0o644)
	got, err := FileSet(t.Context(), root)
	if err != nil {
		t.Fatalf("FileSet: %v", err)
	}
	want := []string{".gitmodules", "lib/sub/.gitignore", "lib/sub/a.txt", "lib/sub/d/tool", "lib/sub/notes.txt", "top.txt"}
	if diff := cmp.Diff(want, paths(got)); diff != "" {
		t.Errorf("FileSet (-want +got):\n%s", diff)
	}
	got, err = FileSetWith(t.Context(), root, FileSetOptions{SkipSubmodules: true})
	if err != nil {
		t.Fatalf("FileSetWith: %v", err)
	}
	if diff := cmp.Diff([]string{".gitmodules", "top.txt"}, paths(got)); diff != "" {
		t.Errorf("FileSetWith(SkipSubmodules) (-want +got):\n%s", diff)
	}
	// From a subdirectory of the checkout, paths are relative to it.
	got, err = FileSet(t.Context(), filepath.Join(root, "lib"))
	if err != nil {
		t.Fatalf("FileSet(lib): %v", err)
	}
	if diff := cmp.Diff([]string{"sub/.gitignore", "sub/a.txt", "sub/d/tool"}, paths(got)); diff != "" {
		t.Errorf("FileSet(lib) (-want +got):\n%s", diff)
	}
}

func TestFileSetIndexModes(t *testing.T) {
	// What FileSet does on Windows, where the work tree has no exec bits
	// and may hold symlinks as plain files.
	needGit(t)
	root := t.TempDir()
	git(t, root, "init", "-q")
	write(t, root, "tool", "#!/bin/sh\n", 0o755)
	write(t, root, "plain", "x", 0o755)
	write(t, root, "link", "tool", 0o644)
	git(t, root, "add", "tool", "plain")
	git(t, root, "update-index", "--chmod=-x", "plain")
	sha := strings.TrimSpace(git(t, root, "hash-object", "-w", "link"))
	git(t, root, "update-index", "--add", "--cacheinfo", "120000,"+sha+",link")
	if err := os.Chmod(filepath.Join(root, "tool"), 0o644); err != nil {
		t.Fatal(err)
	}
	write(t, root, "untracked", "x", 0o755)

	got, _, err := fileSet(t.Context(), root, true, FileSetOptions{})
	if err != nil {
		t.Fatalf("fileSet: %v", err)
	}
	want := []File{
		{Path: "link", Mode: fs.ModeSymlink | 0o777, LinkTarget: "tool"},
		{Path: "plain", Mode: 0o644, Size: 1},
		{Path: "tool", Mode: 0o755, Size: 10},
		{Path: "untracked", Mode: 0o644, Size: 1},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("fileSet with index modes (-want +got):\n%s", diff)
	}
}

func TestFileSetCanceled(t *testing.T) {
	root, _ := checkout(t)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := FileSet(ctx, root); !errors.Is(err, context.Canceled) {
		t.Errorf("FileSet = %v, want context.Canceled", err)
	}
}

func TestParseLsFilesUnstaged(t *testing.T) {
	got, err := parseLsFiles([]byte("? new\x00H a\tb\x00H c d\x00"), false)
	if err != nil {
		t.Fatal(err)
	}
	want := []listed{{path: "new"}, {path: "a\tb", tracked: true}, {path: "c d", tracked: true}}
	if diff := cmp.Diff(want, got, cmp.AllowUnexported(listed{})); diff != "" {
		t.Errorf("parseLsFiles (-want +got):\n%s", diff)
	}
}

func TestParseLsFiles(t *testing.T) {
	out := "? new file\x00H 100755 78981922613b2afb6025042ff6bd878ac1994e85 0\ta\tb\x00M 100644 61780798228d17af2d34fce4cfbdf35556832472 2\tc\x00"
	got, err := parseLsFiles([]byte(out), true)
	if err != nil {
		t.Fatal(err)
	}
	want := []listed{
		{path: "new file"},
		{path: "a\tb", tracked: true, indexMode: 0o100755},
		{path: "c", tracked: true, indexMode: 0o100644},
	}
	if diff := cmp.Diff(want, got, cmp.AllowUnexported(listed{})); diff != "" {
		t.Errorf("parseLsFiles (-want +got):\n%s", diff)
	}
	for _, bad := range []string{"x\x00", "H 100644\tp\x00", "H zzz a 0\tp\x00"} {
		if _, err := parseLsFiles([]byte(bad), true); err == nil {
			t.Errorf("parseLsFiles(%q) = nil error", bad)
		}
	}
}

func TestCollectMergesRuns(t *testing.T) {
	st := func(paths ...string) []statted {
		var out []statted
		for _, p := range paths {
			out = append(out, statted{file: File{Path: p, Mode: 0o644}, ok: p != "gone"})
		}
		return out
	}
	for _, runs := range [][][]statted{
		{st("a", "c", "e"), st("b", "d")},
		{st("e", "a", "c"), st("d", "gone", "b")}, // unsorted: sorted first
		{st(), st("b", "a", "e", "d", "c")},
		{st("a", "b", "c", "d", "e"), st()},
	} {
		files, stamps, outside := collect(runs...)
		if len(outside) != 0 {
			t.Errorf("collect: outside links %v, want none", outside)
		}
		if diff := cmp.Diff([]string{"a", "b", "c", "d", "e"}, paths(files)); diff != "" {
			t.Errorf("collect (-want +got):\n%s", diff)
		}
		if len(stamps) != len(files) {
			t.Errorf("collect: %d stamps for %d files", len(stamps), len(files))
		}
	}
}
