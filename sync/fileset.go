package sync

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// File is one entry of the set of files a sync copies: a regular file or a
// symlink. Directories are not entries; they exist on the box as the
// parents of files.
type File struct {
	// Path is relative to the root, slash-separated and clean.
	Path string
	// Mode is the permission bits of a regular file, or fs.ModeSymlink
	// with permission bits for a symlink.
	Mode fs.FileMode
	// Size is the length of a regular file's content (0 for a symlink).
	Size int64
	// LinkTarget is a symlink's target, slash-separated; empty for a
	// regular file.
	LinkTarget string
}

// FileSet lists the files a sync of root copies, sorted by Path.
//
// In a git checkout these are the tracked files plus the untracked files
// git does not ignore (git ls-files -co --exclude-standard), as they are in
// the working tree: tracked files deleted from the working tree are left
// out, and submodules and nested repositories are skipped. Outside a git
// checkout, FileSet walks the tree, skipping .git directories.
//
// Modes come from the working tree (lstat), except on Windows, whose file
// modes carry no exec bit: there, tracked files take their mode from the
// git index (and symlinks checked out as plain files with
// core.symlinks=false are restored as symlinks), and untracked files get
// 0644.
//
// FileSet fails, naming the entry, on a path that is absolute, not clean or
// contains "..". A symlink whose target is absolute or leads outside root
// is listed as a link: the box gets the link itself, and nothing it points
// to is read or sent (FileSetOptions.Warn learns of such links, and
// FileSetOptions.RefuseOutsideLinks makes them an error).
//
// In a git checkout the files of initialised submodules are listed too,
// under the submodule's path, as they are in its working tree: the
// tracked ones (git ls-files --recurse-submodules) and, when root is the
// checkout's top, the untracked ones the submodule's ignore rules do not
// ignore. Submodules of submodules contribute their tracked files only,
// and an uninitialised submodule has nothing to list.
// FileSetOptions.SkipSubmodules leaves submodules out.
//
// FileSet leaves out the built-in excludes and what root's .crabboxignore
// excludes; it is FileSetWith with no options.
func FileSet(ctx context.Context, root string) ([]File, error) {
	return FileSetWith(ctx, root, FileSetOptions{})
}

// FileSetOptions adjust what FileSetWith lists.
type FileSetOptions struct {
	// Exclude are gitignore-syntax patterns (the config's sync.exclude),
	// read as if they were lines appended to root's .crabboxignore.
	Exclude []string
	// RefuseOutsideLinks makes a symlink whose target is absolute or
	// leads outside root an error naming it, instead of a link synced as
	// it is.
	RefuseOutsideLinks bool
	// Warn, if set, receives one warning per listing naming the symlinks
	// whose target is absolute or leads outside root, which are synced
	// as links (their targets are not followed).
	Warn func(string)
	// SkipSubmodules leaves git submodules out of the file set, as
	// crabbox did before it synced their files.
	SkipSubmodules bool

	// untrackedCache, if set, is the file of the listing cache (see
	// untracked.go).
	untrackedCache string
	// Tests: listingStart replaces the listing's start time, which
	// decides what changed too recently to cache; onCache learns whether
	// the cache answered.
	listingStart time.Time
	onCache      func(hit bool, relist []string)
}

// FileSetWith lists the files a sync of root copies, like FileSet, and
// then leaves out, in this order:
//
//   - untracked files inside a directory named in BuiltinExcludes
//     (node_modules, .venv, target, dist, build, ...) at any depth. Files
//     git tracks are never left out by the built-ins: a checked-in dist/
//     is synced. Outside a git checkout every file is untracked, and such
//     directories are not read at all.
//   - files excluded by the gitignore-syntax patterns of root's
//     .crabboxignore followed by opts.Exclude: comments (#), negation (!),
//     directory-only patterns (trailing /), patterns anchored to root
//     (a leading or inner /), *, ?, [...] and **. As in git, the last
//     pattern that matches decides, a file inside an excluded directory
//     cannot be re-included, and a pattern without a slash matches a name
//     at any depth. Unlike the built-ins these apply to tracked files too,
//     since the user asked for them. A ! pattern also re-includes an
//     untracked directory the built-ins leave out (say !dist/).
//
// Matching is case-sensitive on every platform.
func FileSetWith(ctx context.Context, root string, opts FileSetOptions) ([]File, error) {
	files, _, err := fileSet(ctx, root, runtime.GOOS == "windows", opts)
	return files, err
}

// listed is one path git listed.
type listed struct {
	path      string
	tracked   bool
	indexMode uint32 // git's mode for tracked entries: 0100644, 0100755, 0120000, 0160000
}

const (
	gitModeExec    = 0o100755
	gitModeSymlink = 0o120000
	gitModeGitlink = 0o160000
)

// fileSet lists root's files and the number of paths the excludes left
// out (outside git, an excluded directory counts once: it is not read).
func fileSet(ctx context.Context, root string, indexModes bool, opts FileSetOptions) ([]File, int, error) {
	files, _, excluded, err := listFiles(ctx, root, indexModes, opts)
	if err != nil {
		return nil, 0, fmt.Errorf("list files of %s: %w", root, err)
	}
	return files, excluded, nil
}

// lstatInfo is what listing needs of a file's lstat.
type lstatInfo struct {
	mode  fs.FileMode // fs.ModeSymlink, 0 for a regular file, fs.ModeIrregular otherwise; plus permissions
	size  int64
	mtime int64
	ino   uint64
}

// fileStamp is what the hash cache is keyed by, besides path and size,
// recorded while listing so that a cache hit costs no second lstat.
type fileStamp struct {
	mtime int64
	ino   uint64
}

// listing is what git listed, or why it could not.
type listing struct {
	entries []listed
	err     error
}

// listFiles lists root's files, with each regular file's fileStamp (zero
// for symlinks), and counts the files the sync's excludes leave out (of
// those listed: the listing cache lists only what changed, and no cache
// looks inside the directories the excludes leave out whole).
//
// In a git checkout, git lists the tracked files (from the index, quick)
// and the untracked ones (a walk of the tree) in two processes at once,
// and the tracked files are stat'ed while the walk runs. When the listing
// cache holds, git runs for the directories that changed, or not at all.
func listFiles(ctx context.Context, root string, indexModes bool, opts FileSetOptions) ([]File, []fileStamp, int, error) {
	files, stamps, excluded, outside, err := listAll(ctx, root, indexModes, opts)
	if err != nil || len(outside) == 0 {
		return files, stamps, excluded, err
	}
	if opts.RefuseOutsideLinks {
		return nil, nil, 0, fmt.Errorf("symlink %q points to %q, outside the directory being synced", outside[0].Path, outside[0].LinkTarget)
	}
	if opts.Warn != nil {
		opts.Warn(outsideWarning(outside))
	}
	return files, stamps, excluded, nil
}

// maxNamedLinks bounds the symlinks a warning names.
const maxNamedLinks = 5

// outsideWarning is the warning about the symlinks that lead outside the
// synced directory.
func outsideWarning(outside []File) string {
	var b strings.Builder
	if len(outside) == 1 {
		fmt.Fprintf(&b, "symlink %q points to %q, outside the directory being synced: it is synced as a link, and nothing it points to is sent", outside[0].Path, outside[0].LinkTarget)
		return b.String()
	}
	fmt.Fprintf(&b, "%d symlinks point outside the directory being synced (", len(outside))
	for i, f := range outside[:min(len(outside), maxNamedLinks)] {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%q -> %q", f.Path, f.LinkTarget)
	}
	if len(outside) > maxNamedLinks {
		fmt.Fprintf(&b, ", and %d more", len(outside)-maxNamedLinks)
	}
	b.WriteString("): they are synced as links, and nothing they point to is sent")
	return b.String()
}

// listAll is listFiles, returning the symlinks that lead outside root,
// sorted by path, instead of applying the policy about them.
func listAll(ctx context.Context, root string, indexModes bool, opts FileSetOptions) ([]File, []fileStamp, int, []File, error) {
	m, err := newMatcher(root, opts.Exclude)
	if err != nil {
		return nil, nil, 0, nil, err
	}
	cacheFile := opts.untrackedCache
	if cacheFile != "" && !opts.SkipSubmodules && hasSubmodules(root) {
		// The key covers the checkout's index, not its submodules'.
		cacheFile = ""
	}
	lc := openListingCache(ctx, root, cacheFile, indexModes, m, opts.listingStart)
	if opts.onCache != nil {
		opts.onCache(lc.hit(), lc.relist())
	}
	if kept, ok := lc.kept(); ok {
		// Nothing changed that git would list differently.
		files, stamps, outside, err := statCollect(ctx, root, kept, indexModes)
		return files, stamps, 0, outside, err
	}
	// git's listing of untracked files runs beside the rest; whatever
	// way listFiles returns, it and the listing cache's walk are over.
	gitCtx, cancelGit := context.WithCancel(ctx)
	var fromGit chan listing
	defer func() {
		cancelGit()
		if fromGit != nil {
			<-fromGit
		}
		lc.stopWalk()
	}()
	listUntracked := func(args ...string) {
		fromGit = make(chan listing, 1)
		go func() {
			entries, _, err := gitList(gitCtx, root, append([]string{"-o", "--exclude-standard"}, args...)...)
			fromGit <- listing{entries, err}
		}()
	}
	receive := func() listing {
		l := <-fromGit
		fromGit = nil
		return l
	}

	excluded := 0
	var seen map[string]bool
	// keep drops what is not synced: nested repositories (listed as
	// "dir/"), unmerged paths past their first stage, excluded paths.
	keep := func(entries []listed) ([]listed, error) {
		if seen == nil {
			seen = make(map[string]bool, len(entries))
		}
		var out []listed
		for _, e := range entries {
			if strings.HasSuffix(e.path, "/") || seen[e.path] || e.indexMode == gitModeGitlink {
				continue
			}
			seen[e.path] = true
			if err := checkPath(e.path); err != nil {
				return nil, fmt.Errorf("%q: %w", e.path, err)
			}
			if m.excluded(e.path, false, e.tracked) {
				excluded++
				continue
			}
			out = append(out, e)
		}
		return out, nil
	}

	// todo are the tracked files to stat, untracked returns the untracked
	// ones, both as keep leaves them.
	var todo []listed
	var untracked func() ([]listed, error)
	if lc.hit() {
		// The index and the ignore rules did not change: the tracked
		// files are as kept last time, and so are the untracked ones
		// outside the directories that changed.
		todo = lc.tracked()
		args := []string{"--"}
		for _, d := range lc.relist() {
			args = append(args, ":(literal)"+d)
		}
		listUntracked(args...)
		lc.startWalk(ctx)
		untracked = func() ([]listed, error) {
			l := receive()
			if l.err != nil {
				return nil, l.err
			}
			fresh, err := keep(l.entries)
			return append(lc.untracked(), fresh...), err
		}
	} else {
		listUntracked()
		lc.startWalk(ctx)
		// Git's modes of tracked files matter only where the file system
		// cannot express them (indexModes); elsewhere the file system says
		// what a file is, and a submodule is a directory, which is skipped.
		selection := []string{"-c"}
		if indexModes {
			selection = append(selection, "-s")
		}
		if !opts.SkipSubmodules {
			// The tracked files of initialised submodules, in place of
			// their gitlinks. git refuses it with -o: files untracked
			// inside a submodule are not listed.
			selection = append(selection, "--recurse-submodules")
		}
		tracked, isRepo, err := gitList(ctx, root, selection...)
		if err != nil || !isRepo {
			cancelGit()
			receive()
			lc.stopWalk()
			if err != nil {
				return nil, nil, 0, nil, err
			}
			entries, excluded, err := walk(ctx, root, m)
			if err != nil {
				return nil, nil, 0, nil, err
			}
			files, stamps, outside, err := statCollect(ctx, root, entries, indexModes)
			return files, stamps, excluded, outside, err
		}
		if todo, err = keep(tracked); err != nil {
			return nil, nil, 0, nil, err
		}
		var inSubmodules func() ([]listed, error)
		if !opts.SkipSubmodules && hasSubmodules(root) {
			inSubmodules = listSubmodulesUntracked(gitCtx, root)
			defer func() { // over, whichever way listAll returns
				cancelGit()
				inSubmodules()
			}()
		}
		untracked = func() ([]listed, error) {
			l := receive()
			if l.err != nil {
				return nil, l.err
			}
			if inSubmodules != nil {
				sub, err := inSubmodules()
				if err != nil {
					return nil, err
				}
				l.entries = append(l.entries, sub...)
			}
			return keep(l.entries)
		}
	}

	type statResult struct {
		stats []statted
		err   error
	}
	trackedStats := make(chan statResult, 1)
	go func() {
		stats, err := statAll(ctx, root, todo, indexModes)
		trackedStats <- statResult{stats, err}
	}()
	utodo, err := untracked()
	var stats []statted
	if err == nil {
		stats, err = statAll(ctx, root, utodo, indexModes)
	}
	t := <-trackedStats
	if err := cmp.Or(err, t.err); err != nil {
		return nil, nil, 0, nil, err
	}
	lc.save(merge(cacheable(todo), cacheable(utodo), comparePaths))
	files, stamps, outside := collect(t.stats, stats)
	return files, stamps, excluded, outside, nil
}

// hasSubmodules reports whether root's checkout may have submodules: its
// top holds a .gitmodules file (git needs one to initialise a submodule).
// Only the top of a checkout has a listing cache (it needs root/.git).
func hasSubmodules(root string) bool {
	_, err := os.Lstat(filepath.Join(root, ".gitmodules"))
	return err == nil
}

// listSubmodulesUntracked starts listing the untracked, non-ignored files
// of the initialised submodules .gitmodules names at root (each with its
// own ignore rules, as git ls-files -o --exclude-standard run in it), and
// returns a function that waits for them, prefixed with their
// submodule's path. git cannot list them with the checkout's own
// untracked files (ls-files refuses --recurse-submodules with -o).
// Submodules of submodules are not looked into.
func listSubmodulesUntracked(ctx context.Context, root string) func() ([]listed, error) {
	done := make(chan listing, 1)
	go func() {
		var all []listed
		for _, p := range submodulePaths(ctx, root) {
			if _, err := os.Lstat(filepath.Join(root, filepath.FromSlash(p), ".git")); err != nil {
				continue // not initialised: nothing to list
			}
			entries, isRepo, err := gitList(ctx, filepath.Join(root, filepath.FromSlash(p)), "-o", "--exclude-standard")
			if err != nil {
				done <- listing{err: fmt.Errorf("submodule %s: %w", p, err)}
				return
			}
			if !isRepo {
				continue
			}
			for _, e := range entries {
				all = append(all, listed{path: p + "/" + e.path})
			}
		}
		done <- listing{entries: all}
	}()
	var l listing
	received := false
	return func() ([]listed, error) {
		if !received {
			l, received = <-done, true
		}
		return l.entries, l.err
	}
}

// submodulePaths returns the paths .gitmodules at root gives its
// submodules, those that are clean relative paths.
func submodulePaths(ctx context.Context, root string) []string {
	out, err := exec.CommandContext(ctx, "git", "-C", root, "config", "-z", "-f", ".gitmodules", "--get-regexp", `^submodule\..*\.path$`).Output()
	if err != nil {
		return nil // none, or a .gitmodules git cannot read: git ls-files recurses into none either
	}
	var paths []string
	for rec := range strings.SplitSeq(string(out), "\x00") {
		_, p, ok := strings.Cut(rec, "\n")
		p = strings.TrimSuffix(p, "/")
		if ok && p != "" && checkPath(p) == nil {
			paths = append(paths, p)
		}
	}
	return paths
}

// statCollect stats entries and collects them into the file set.
func statCollect(ctx context.Context, root string, entries []listed, indexModes bool) ([]File, []fileStamp, []File, error) {
	stats, err := statAll(ctx, root, entries, indexModes)
	if err != nil {
		return nil, nil, nil, err
	}
	files, stamps, outside := collect(stats)
	return files, stamps, outside, nil
}

// collect turns what statAll found into the file set, sorted, and the
// files' stamps, and returns the symlinks that lead outside the root,
// sorted. Each of runs is usually sorted already (git lists in order):
// they are merged.
func collect(runs ...[]statted) (files []File, stamps []fileStamp, outside []File) {
	byPath := func(a, b statted) int { return strings.Compare(a.file.Path, b.file.Path) }
	var stats []statted
	for _, run := range runs {
		run = slices.DeleteFunc(run, func(st statted) bool { return !st.ok })
		if !slices.IsSortedFunc(run, byPath) {
			slices.SortFunc(run, byPath)
		}
		stats = merge(stats, run, byPath)
	}
	files = make([]File, len(stats))
	stamps = make([]fileStamp, len(stats))
	var links map[string]string
	var linkAt map[string]int
	for i, st := range stats {
		files[i] = st.file
		if st.file.LinkTarget == "" {
			stamps[i] = st.stamp
			continue
		}
		if links == nil {
			links, linkAt = map[string]string{}, map[string]int{}
		}
		links[st.file.Path] = st.file.LinkTarget
		linkAt[st.file.Path] = i
	}
	for _, p := range outsideLinks(links) {
		outside = append(outside, files[linkAt[p]])
	}
	return files, stamps, outside
}

func comparePaths(a, b listed) int { return strings.Compare(a.path, b.path) }

// cacheable returns what the listing cache keeps of entries, sorted.
func cacheable(entries []listed) []listed {
	out := make([]listed, len(entries))
	for i, e := range entries {
		out[i] = listed{path: e.path, tracked: e.tracked}
	}
	if !slices.IsSortedFunc(out, comparePaths) {
		slices.SortFunc(out, comparePaths)
	}
	return out
}

// merge merges a and b, both sorted by cmp, into a new sorted slice (or
// returns one of them when the other is empty).
func merge[T any](a, b []T, cmp func(T, T) int) []T {
	switch {
	case len(a) == 0:
		return b
	case len(b) == 0:
		return a
	}
	out := make([]T, 0, len(a)+len(b))
	for len(a) > 0 && len(b) > 0 {
		if cmp(b[0], a[0]) < 0 {
			out, b = append(out, b[0]), b[1:]
		} else {
			out, a = append(out, a[0]), a[1:]
		}
	}
	return append(append(out, a...), b...)
}

// statted is what stat found of one listed entry.
type statted struct {
	file  File
	stamp fileStamp
	ok    bool
}

// statChunk is how many entries a scanning goroutine takes at a time.
const statChunk = 256

// statAll stats the entries on several goroutines: listing a large
// checkout is mostly waiting for lstat.
func statAll(ctx context.Context, rootPath string, entries []listed, indexModes bool) ([]statted, error) {
	root, err := openRoot(rootPath)
	if err != nil {
		return nil, err
	}
	defer root.close()
	out := make([]statted, len(entries))
	err = forEach(ctx, len(entries), statChunk, func(_, i int) error {
		f, stamp, ok, err := stat(root, entries[i], indexModes)
		out[i] = statted{f, stamp, ok}
		return err
	})
	return out, err
}

// stat describes e as it is in the working tree. It reports false for
// entries that are not synced: missing ones, directories (submodules),
// sockets and other special files.
func stat(root *rootDir, e listed, indexModes bool) (File, fileStamp, bool, error) {
	fi, err := root.lstat(e.path)
	if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR) {
		return File{}, fileStamp{}, false, nil
	}
	if err != nil {
		return File{}, fileStamp{}, false, err
	}
	// Made only where it is needed: per file, it costs as much as the
	// rest of stat outside the kernel.
	name := func() string { return filepath.Join(root.path, filepath.FromSlash(e.path)) }
	stamp := fileStamp{mtime: fi.mtime, ino: fi.ino}
	f := File{Path: e.path}
	switch fi.mode.Type() {
	case fs.ModeSymlink:
		target, err := os.Readlink(name())
		if err != nil {
			return File{}, fileStamp{}, false, err
		}
		f.Mode = fs.ModeSymlink | 0o777
		f.LinkTarget = filepath.ToSlash(target)
	case 0:
		f.Mode = fi.mode.Perm()
		f.Size = fi.size
	default:
		return File{}, fileStamp{}, false, nil
	}
	if indexModes {
		if err := applyIndexMode(&f, name(), e); err != nil {
			return File{}, fileStamp{}, false, err
		}
	}
	if f.Mode&fs.ModeSymlink != 0 && f.LinkTarget == "" {
		return File{}, fileStamp{}, false, fmt.Errorf("symlink %q has an empty target", e.path)
	}
	return f, stamp, true, nil
}

// maxLinkFile bounds what is read from a symlink checked out as a plain
// file.
const maxLinkFile = 4096

// applyIndexMode replaces modes the file system cannot express (Windows)
// with the git index's.
func applyIndexMode(f *File, name string, e listed) error {
	switch {
	case !e.tracked:
		if f.LinkTarget == "" {
			f.Mode = 0o644
		}
	case e.indexMode == gitModeSymlink && f.LinkTarget == "":
		target, err := readSmall(name)
		if err != nil {
			return err
		}
		f.Mode, f.Size, f.LinkTarget = fs.ModeSymlink|0o777, 0, filepath.ToSlash(target)
	case f.LinkTarget == "" && e.indexMode == gitModeExec:
		f.Mode = 0o755
	case f.LinkTarget == "":
		f.Mode = 0o644
	}
	return nil
}

func readSmall(name string) (string, error) {
	file, err := os.Open(name)
	if err != nil {
		return "", err
	}
	defer file.Close()
	b, err := io.ReadAll(io.LimitReader(file, maxLinkFile+1))
	if err != nil {
		return "", err
	}
	if len(b) > maxLinkFile {
		return "", fmt.Errorf("%s: symlink in the git index but a large file in the working tree", name)
	}
	return string(b), nil
}

// gitList lists root's files with git ls-files and the given selection
// (-c and -s for tracked files, -o and --exclude-standard for untracked
// ones). It reports false, without an error, when root is not in a git
// work tree.
func gitList(ctx context.Context, root string, selection ...string) ([]listed, bool, error) {
	cmd := exec.CommandContext(ctx, "git", append([]string{"-C", root, "ls-files", "-z", "-t"}, selection...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if errors.Is(err, exec.ErrNotFound) {
		if _, statErr := os.Stat(filepath.Join(root, ".git")); statErr == nil {
			return nil, false, errors.New("git is needed to list the files of a git checkout but is not installed")
		}
		return nil, false, nil
	}
	if err != nil {
		if ctx.Err() != nil {
			return nil, false, ctx.Err()
		}
		msg := strings.TrimSpace(stderr.String())
		var exitErr *exec.ExitError
		if errors.As(err, &exitErr) && strings.Contains(msg, "not a git repository") {
			return nil, false, nil
		}
		return nil, false, fmt.Errorf("git ls-files: %w: %s", err, msg)
	}
	entries, err := parseLsFiles(out, slices.Contains(selection, "-s"))
	return entries, err == nil, err
}

// parseLsFiles parses `git ls-files -z -t` output: "? PATH" for untracked
// files; for tracked ones "TAG PATH", or with staged (-s) "TAG MODE OBJECT
// STAGE\tPATH". Paths are substrings of one copy of out.
func parseLsFiles(out []byte, staged bool) ([]listed, error) {
	all := string(out)
	entries := make([]listed, 0, strings.Count(all, "\x00"))
	for rec := range strings.SplitSeq(all, "\x00") {
		if len(rec) == 0 {
			continue
		}
		if len(rec) < 3 || rec[1] != ' ' {
			return nil, fmt.Errorf("git ls-files: unexpected entry %q", rec)
		}
		if rec[0] == '?' {
			entries = append(entries, listed{path: rec[2:]})
			continue
		}
		if !staged {
			entries = append(entries, listed{path: rec[2:], tracked: true})
			continue
		}
		meta, p, ok := strings.Cut(rec[2:], "\t")
		fields := strings.Fields(meta)
		if !ok || len(fields) != 3 {
			return nil, fmt.Errorf("git ls-files: unexpected entry %q", rec)
		}
		mode, err := strconv.ParseUint(fields[0], 8, 32)
		if err != nil {
			return nil, fmt.Errorf("git ls-files: unexpected mode in %q", rec)
		}
		entries = append(entries, listed{path: p, tracked: true, indexMode: uint32(mode)})
	}
	return entries, nil
}

// walk lists the files under root that m does not exclude, skipping .git
// directories, and counts the excluded files and directories.
func walk(ctx context.Context, root string, m *matcher) ([]listed, int, error) {
	var entries []listed
	excluded := 0
	err := filepath.WalkDir(root, func(name string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if d.Name() == ".git" && name != root {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		if name == root {
			return nil
		}
		rel, err := filepath.Rel(root, name)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		if m.excluded(rel, d.IsDir(), false) {
			excluded++
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		if d.IsDir() {
			return nil
		}
		entries = append(entries, listed{path: rel})
		return nil
	})
	return entries, excluded, err
}
