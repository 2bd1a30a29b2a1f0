package sync

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	gosync "sync"
	"time"

	"github.com/crabbox-dev/crabbox/internal/atomicfile"
)

// The listing cache remembers what the sync's excludes kept of git's two
// listings of a checkout, the tracked files (git ls-files -c, which reads
// the index) and the untracked ones (git ls-files -o --exclude-standard,
// which reads every directory), sorted, together with everything they
// depend on, so that the next listing of an unchanged checkout runs no git
// at all, stats the directories instead of reading them and stats the
// files in the order kept:
//
//   - the stamp (mtime, ctime, inode) of every directory below the root
//     that could hold a file the sync takes: all but .git, the insides of
//     nested repositories and the directories the sync's own excludes
//     leave out whole. Creating, removing or renaming an entry changes its
//     directory's mtime and ctime, and nothing sets a ctime back;
//   - the stamps of the .gitignore files in them;
//   - the stamp of the index (git replaces it whenever it changes it);
//   - the sync's own excludes (.crabboxignore and the caller's patterns);
//   - what else steers git's ignore rules: the repository's info/exclude
//     and config, the user's and the system's git config, the excludes
//     file, and the environment variables that steer git (GIT_*, HOME,
//     XDG_CONFIG_HOME).
//
// If any of them differs, git lists as usual, and a new cache is made from
// what it lists. The cache is not written when one of them changed too
// recently for its stamp to tell a later change apart (see racyFine), nor
// for a checkout whose git config includes other files (their changes
// would go unseen), nor when the git directory is not a plain .git
// directory (worktrees, submodules) or the environment points git
// elsewhere (GIT_DIR, GIT_WORK_TREE, GIT_INDEX_FILE, GIT_COMMON_DIR). It only exists where the file
// system's directory times are trusted (Linux and macOS).
//
// One gap remains: a core.excludesFile set in a git config file other
// than those above (a system config elsewhere than /etc, /usr/local/etc
// or /opt/homebrew/etc) is read when the cache is made, and a later
// change of that setting is seen once a directory changes.

// stamp is what stat says of a path that changes when the path does; the
// zero stamp is an absent path.
type stamp struct {
	MTime, CTime int64
	Ino          uint64
	Size         int64
	Mode         uint32
}

// The file type bits of a stamp's Mode, the same on Linux and macOS.
const (
	sIFMT  = 0o170000
	sIFDIR = 0o040000
)

const (
	untrackedSuffix = ".untracked"
	untrackedHeader = "crabbox untracked cache 2\n"
	// maxCachedDirs bounds the directories the cache stats instead of
	// letting git read them: past it (large ignored trees that the
	// sync's own excludes do not leave out), git lists as usual.
	maxCachedDirs = 200_000
)

// stampedPath is a path relative to the root ("" for the root) and its
// stamp.
type stampedPath struct {
	path string
	st   stamp
}

type untrackedCache struct {
	key          string        // untrackedKey of the inputs
	excludesFile string        // git's core.excludesFile, resolved
	dirs         []stampedPath // the directories, the root first
	ignores      []stampedPath // their .gitignore files
	// kept is what git listed, tracked files and untracked ones, that
	// the sync's excludes keep, sorted by path: with nothing changed,
	// the candidates of the file set.
	kept []listed
}

// untrackedInputs is what the key of an untracked cache is made of,
// besides the tracked paths.
type untrackedInputs struct {
	ok     bool // false: no cache for this checkout
	digest []byte
	// racy: one of the files changed too recently to trust its stamp.
	racy bool
}

// gitEnvironment is the part of the environment that steers git.
func gitEnvironment() []string {
	var env []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "GIT_") || strings.HasPrefix(kv, "HOME=") || strings.HasPrefix(kv, "XDG_CONFIG_HOME=") {
			env = append(env, kv)
		}
	}
	slices.Sort(env)
	return env
}

// gitConfigFiles are the config files git reads for root, and the
// default excludes file.
func gitConfigFiles(root string) (configs []string, defaultExcludes string) {
	home, _ := os.UserHomeDir()
	xdg := os.Getenv("XDG_CONFIG_HOME")
	if xdg == "" && home != "" {
		xdg = filepath.Join(home, ".config")
	}
	configs = []string{
		filepath.Join(root, ".git", "config"),
		filepath.Join(root, ".git", "config.worktree"),
		"/etc/gitconfig", "/usr/local/etc/gitconfig", "/opt/homebrew/etc/gitconfig",
	}
	if home != "" {
		configs = append(configs, filepath.Join(home, ".gitconfig"))
	}
	if xdg != "" {
		configs = append(configs, filepath.Join(xdg, "git", "config"))
		defaultExcludes = filepath.Join(xdg, "git", "ignore")
	}
	return configs, defaultExcludes
}

// untrackedKeyInputs digests everything but the directories that git's
// listings depend on, with excludesFile as git's resolved
// core.excludesFile. ownExcludes are the sync's own exclude patterns.
// Files changed after since are racy.
//
// With watched, the files under root/.git are left out: a change clock
// (ChangeClock) watches them.
func untrackedKeyInputs(root, excludesFile string, ownExcludes []byte, since time.Time, watched bool) untrackedInputs {
	if !untrackedCacheSupported {
		return untrackedInputs{}
	}
	for _, v := range []string{"GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE", "GIT_COMMON_DIR"} {
		if os.Getenv(v) != "" {
			// git reads an index or a repository elsewhere than
			// root/.git, whose stamps the key would not cover.
			return untrackedInputs{}
		}
	}
	if fi, err := os.Lstat(filepath.Join(root, ".git")); err != nil || !fi.IsDir() {
		return untrackedInputs{}
	}
	h := sha256.New()
	for _, kv := range gitEnvironment() {
		h.Write([]byte(kv))
		h.Write([]byte{0})
	}
	h.Write(ownExcludes)
	h.Write([]byte{0})
	configs, defaultExcludes := gitConfigFiles(root)
	files := append(configs, filepath.Join(root, ".git", "index"), filepath.Join(root, ".git", "info", "exclude"), defaultExcludes, excludesFile)
	var stamps []stampedPath
	gitDir := filepath.Join(root, ".git") + string(filepath.Separator)
	for _, name := range files {
		if name == "" || (watched && strings.HasPrefix(name, gitDir)) {
			continue
		}
		st, err := stampFile(name)
		if err != nil {
			return untrackedInputs{}
		}
		writeStamp(h, name, st)
		if st != (stamp{}) {
			stamps = append(stamps, stampedPath{name, st})
		}
	}
	for _, name := range configs {
		data, err := os.ReadFile(name)
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return untrackedInputs{}
		}
		if bytes.Contains(bytes.ToLower(data), []byte("include")) {
			// [include] and [includeIf] name files the key does not
			// cover.
			return untrackedInputs{}
		}
	}
	return untrackedInputs{ok: true, digest: h.Sum(nil), racy: racyStamps(since, stamps)}
}

func writeStamp(h interface{ Write([]byte) (int, error) }, name string, st stamp) {
	h.Write(appendStamp(append([]byte(name), 0), st))
}

// appendStamp appends st's fields as varints.
func appendStamp(b []byte, st stamp) []byte {
	b = binary.AppendVarint(b, st.MTime)
	b = binary.AppendVarint(b, st.CTime)
	b = binary.AppendUvarint(b, st.Ino)
	b = binary.AppendVarint(b, st.Size)
	return binary.AppendUvarint(b, uint64(st.Mode))
}

// untrackedKey is the key of an untracked cache.
func untrackedKey(in untrackedInputs) string { return hex.EncodeToString(in.digest) }

// resolveExcludesFile asks git for core.excludesFile ("" when unset).
func resolveExcludesFile(ctx context.Context, root string) (string, error) {
	out, err := exec.CommandContext(ctx, "git", "-C", root, "config", "--path", "--get", "core.excludesFile").Output()
	var exitErr *exec.ExitError
	if errors.As(err, &exitErr) && exitErr.ExitCode() == 1 {
		return "", nil // not set
	}
	if err != nil {
		return "", err
	}
	name := strings.TrimSpace(string(out))
	if name != "" && !filepath.IsAbs(name) {
		name = filepath.Join(root, name) // relative to the work tree, as git reads it
	}
	return name, nil
}

// loadUntracked reads an untracked cache; nil if there is none or it is
// malformed.
func loadUntracked(name string) *untrackedCache {
	data, err := os.ReadFile(name)
	if err != nil {
		return nil
	}
	c, err := parseUntracked(data)
	if err != nil {
		return nil
	}
	return c
}

// The cache file is the header, then the key, the excludes file, the
// directories and .gitignore files (count, then each path and stamp) and
// the kept paths (count, then each path and a byte, 1 for a tracked file):
// strings as uvarint length and bytes, counts and stamps as varints.
func formatUntracked(c *untrackedCache) []byte {
	b := []byte(untrackedHeader)
	stamped := func(list []stampedPath) {
		b = binary.AppendUvarint(b, uint64(len(list)))
		for _, p := range list {
			b = appendStamp(appendString(b, p.path), p.st)
		}
	}
	b = appendString(b, c.key)
	b = appendString(b, c.excludesFile)
	stamped(c.dirs)
	stamped(c.ignores)
	b = binary.AppendUvarint(b, uint64(len(c.kept)))
	for _, e := range c.kept {
		b = appendString(b, e.path)
		tracked := byte(0)
		if e.tracked {
			tracked = 1
		}
		b = append(b, tracked)
	}
	return b
}

var errMalformedCache = errors.New("malformed untracked cache")

func parseUntracked(data []byte) (*untrackedCache, error) {
	all, ok := strings.CutPrefix(string(data), untrackedHeader)
	if !ok {
		return nil, errMalformedCache
	}
	d := &decoder{data: all}
	stamped := func() []stampedPath {
		list := make([]stampedPath, d.count())
		for i := range list {
			list[i].path = d.string()
			list[i].st = stamp{MTime: d.varint(), CTime: d.varint(), Ino: d.uvarint(), Size: d.varint(), Mode: uint32(d.uvarint())}
		}
		return list
	}
	c := &untrackedCache{}
	c.key = d.string()
	c.excludesFile = d.string()
	c.dirs = stamped()
	c.ignores = stamped()
	c.kept = make([]listed, d.count())
	for i := range c.kept {
		c.kept[i].path = d.string()
		switch d.byte() {
		case 0:
		case 1:
			c.kept[i].tracked = true
		default:
			d.bad = true
		}
	}
	if d.bad || d.off != len(all) {
		return nil, errMalformedCache
	}
	for _, list := range [][]stampedPath{c.dirs, c.ignores} {
		for _, p := range list {
			if p.path != "" && checkPath(p.path) != nil {
				return nil, errMalformedCache
			}
		}
	}
	for i, e := range c.kept {
		if checkPath(e.path) != nil || i > 0 && c.kept[i-1].path >= e.path {
			return nil, errMalformedCache
		}
	}
	return c, nil
}

// maxChangedDirs bounds the directories a listing re-reads with git
// while taking the rest from the cache; past it git lists everything.
const maxChangedDirs = 64

// changes returns the directories whose stamp differs from the cache's,
// and those of the .gitignore files that differ, statting them on several
// goroutines. It reports false when there are more than maxChangedDirs,
// or a stat fails.
func (c *untrackedCache) changes(ctx context.Context, root *rootDir) ([]string, bool) {
	type item struct {
		stampedPath
		dir string // the directory to list again when it differs
	}
	all := make([]item, 0, len(c.dirs)+len(c.ignores))
	for _, d := range c.dirs {
		all = append(all, item{d, d.path})
	}
	for _, g := range c.ignores {
		all = append(all, item{g, parentDir(g.path)})
	}
	var (
		mu      gosync.Mutex
		changed []string
	)
	err := forEach(ctx, len(all), statChunk, func(_, i int) error {
		st, err := root.stampAt(all[i].path)
		if err != nil || st == all[i].st {
			return err
		}
		mu.Lock()
		defer mu.Unlock()
		changed = append(changed, all[i].dir)
		if len(changed) > maxChangedDirs {
			return errTooManyChanges
		}
		return nil
	})
	if err != nil {
		return nil, false
	}
	return topmost(changed), true
}

var errTooManyChanges = errors.New("too many changed directories")

// parentDir is the directory holding p ("" for the root).
func parentDir(p string) string {
	if i := strings.LastIndexByte(p, '/'); i >= 0 {
		return p[:i]
	}
	return ""
}

// under reports whether p is dir or below it ("" holds everything).
func under(p, dir string) bool {
	return dir == "" || p == dir || strings.HasPrefix(p, dir+"/")
}

// topmost returns the directories of dirs not below another one of them,
// sorted.
func topmost(dirs []string) []string {
	slices.Sort(dirs)
	dirs = slices.Compact(dirs)
	var out []string
	for _, d := range dirs {
		if len(out) == 0 || !under(d, out[len(out)-1]) {
			out = append(out, d)
		}
	}
	return out
}

// walkDirs stamps the directories that could hold a file the sync takes
// (see the comment at the top) at and below each of starts (relative to
// root, "" for root itself) and their .gitignore files, each directory
// before it is read. It reports false when there are more than
// maxCachedDirs or one cannot be read.
func walkDirs(ctx context.Context, root *rootDir, m *matcher, starts ...string) (dirs, ignores []stampedPath, ok bool) {
	var (
		mu     gosync.Mutex
		cond   = gosync.NewCond(&mu)
		queue  = slices.Clone(starts)
		busy   int // directories being read
		failed bool
		wg     gosync.WaitGroup
	)
	m = m.clone() // used under mu
	for range scanWorkers() {
		wg.Go(func() {
			mu.Lock()
			defer mu.Unlock()
			for {
				for len(queue) == 0 && busy > 0 && !failed {
					cond.Wait()
				}
				if len(dirs) >= maxCachedDirs || ctx.Err() != nil {
					failed = true
				}
				if failed || len(queue) == 0 {
					cond.Broadcast()
					return
				}
				rel := queue[len(queue)-1]
				queue = queue[:len(queue)-1]
				busy++
				mu.Unlock()
				d, err := readDirOf(root, rel)
				mu.Lock()
				busy--
				if err != nil {
					failed = true
					continue
				}
				dirs = append(dirs, stampedPath{rel, d.st})
				if d.ignore != nil {
					ignores = append(ignores, *d.ignore)
				}
				if !d.nested {
					// git lists a nested repository as one entry and
					// never reads it; its own stamp tells when it stops
					// being one.
					for _, sub := range d.subdirs {
						if !m.excluded(sub, true, false) {
							queue = append(queue, sub)
						}
					}
				}
				cond.Broadcast()
			}
		})
	}
	wg.Wait()
	if failed {
		return nil, nil, false
	}
	byPath := func(a, b stampedPath) int { return strings.Compare(a.path, b.path) }
	slices.SortFunc(dirs, byPath)
	slices.SortFunc(ignores, byPath)
	return dirs, ignores, true
}

// dirRead is what walkDirs learns of one directory.
type dirRead struct {
	st      stamp // taken before the directory was read
	subdirs []string
	ignore  *stampedPath
	nested  bool // holds a .git: a repository of its own
}

func readDirOf(root *rootDir, rel string) (dirRead, error) {
	var d dirRead
	var err error
	if d.st, err = root.stampAt(rel); err != nil {
		return d, err
	}
	if d.st.Mode&sIFMT != sIFDIR {
		return d, fmt.Errorf("%s is no longer a directory", rel)
	}
	f, err := root.openDir(rel)
	if err != nil {
		return d, err
	}
	entries, err := f.ReadDir(-1)
	f.Close()
	if err != nil {
		return d, err
	}
	for _, e := range entries {
		name := e.Name()
		child := name
		if rel != "" {
			child = rel + "/" + name
		}
		switch {
		case name == ".git":
			d.nested = rel != ""
		case name == ".gitignore":
			st, err := stampFile(filepath.Join(root.path, filepath.FromSlash(child)))
			if err != nil {
				return d, err
			}
			d.ignore = &stampedPath{child, st}
		case e.IsDir():
			d.subdirs = append(d.subdirs, child)
		}
	}
	return d, nil
}

// racyStamps reports whether any of the stamps changed too recently
// before since for a later change to be told apart.
func racyStamps(since time.Time, lists ...[]stampedPath) bool {
	for _, list := range lists {
		for _, p := range list {
			for _, t := range []int64{p.st.MTime, p.st.CTime} {
				window := racyFine
				if t%int64(time.Second) == 0 {
					window = racyCoarse
				}
				if t > since.Add(-window).UnixNano() {
					return true
				}
			}
		}
	}
	return false
}

func saveUntracked(name string, c *untrackedCache) error {
	return atomicfile.WriteCache(name, formatUntracked(c))
}

// listingCache is the untracked cache's part in one listing.
type listingCache struct {
	root  string
	file  string // "" when the cache is not used
	m     *matcher
	start time.Time
	cache *untrackedCache // as read, when it is still valid
	// changed are the directories whose untracked files git lists again
	// (nil: none; the rest of the cache holds). Empty cache: git lists
	// everything.
	changed []string
	// walked receives the new cache's directories, when git lists.
	walked chan walkResult
	stop   context.CancelFunc
}

type walkResult struct {
	ok            bool
	excludesFile  string
	inputs        untrackedInputs
	dirs, ignores []stampedPath
}

// openListingCache reads the cache for root and keeps it if nothing it
// depends on changed.
func openListingCache(ctx context.Context, root, file string, indexModes bool, m *matcher, start time.Time) *listingCache {
	if start.IsZero() {
		start = time.Now()
	}
	lc := &listingCache{root: root, m: m, start: start}
	if file == "" || indexModes || !untrackedCacheSupported {
		return lc
	}
	lc.file = file
	c := loadUntracked(file)
	if c == nil {
		return lc
	}
	in := untrackedKeyInputs(root, c.excludesFile, m.source, lc.start, false)
	if !in.ok || c.key != untrackedKey(in) {
		return lc
	}
	dir, err := openRoot(root)
	if err != nil {
		return lc
	}
	defer dir.close()
	changed, ok := c.changes(ctx, dir)
	if !ok || slices.Contains(changed, "") {
		return lc
	}
	lc.cache, lc.changed = c, changed
	return lc
}

// hit reports whether the cache holds the tracked files and all or part
// (see relist) of the untracked ones.
func (lc *listingCache) hit() bool { return lc.cache != nil }

// kept returns what the sync's excludes kept of the cached listing,
// sorted, when nothing changed since it was made.
func (lc *listingCache) kept() ([]listed, bool) {
	if lc.cache == nil || lc.changed != nil {
		return nil, false
	}
	return lc.cache.kept, true
}

// relist returns the directories git must list the untracked files of
// again, or nil.
func (lc *listingCache) relist() []string { return lc.changed }

// tracked returns the cached tracked files the sync's excludes keep.
func (lc *listingCache) tracked() []listed {
	var entries []listed
	for _, e := range lc.cache.kept {
		if e.tracked {
			entries = append(entries, e)
		}
	}
	return entries
}

// untracked returns the cached untracked files the sync's excludes keep,
// but those below the directories to list again.
func (lc *listingCache) untracked() []listed {
	var entries []listed
	for _, e := range lc.cache.kept {
		if !e.tracked && !lc.relisted(e.path) {
			entries = append(entries, e)
		}
	}
	return entries
}

func (lc *listingCache) relisted(p string) bool {
	for _, d := range lc.changed {
		if under(p, d) {
			return true
		}
	}
	return false
}

// startWalk stamps the checkout's directories for a new cache while git
// lists.
func (lc *listingCache) startWalk(ctx context.Context) {
	if lc.file == "" {
		return
	}
	ctx, lc.stop = context.WithCancel(ctx)
	lc.walked = make(chan walkResult, 1)
	go func() {
		var w walkResult
		var excludesFile string
		var err error
		if lc.cache != nil {
			// The key held: so does the excludes file it names.
			excludesFile = lc.cache.excludesFile
		} else {
			excludesFile, err = resolveExcludesFile(ctx, lc.root)
		}
		if err == nil {
			w.excludesFile = excludesFile
			w.inputs = untrackedKeyInputs(lc.root, excludesFile, lc.m.source, lc.start, false)
		}
		starts := []string{""}
		if lc.cache != nil {
			starts = lc.changed
		}
		if dir, err := openRoot(lc.root); err == nil && w.inputs.ok {
			w.dirs, w.ignores, w.ok = walkDirs(ctx, dir, lc.m, starts...)
			dir.close()
		}
		lc.walked <- w
	}()
}

// stopWalk abandons the walk, if one is running.
func (lc *listingCache) stopWalk() {
	if lc.walked != nil {
		lc.stop()
		<-lc.walked
		lc.walked = nil
	}
}

// save writes a new cache of what the sync's excludes kept of git's
// listings (sorted), unless something changed while they were made.
func (lc *listingCache) save(kept []listed) {
	if lc.walked == nil {
		return
	}
	w := <-lc.walked
	lc.walked = nil
	lc.stop()
	if !w.ok || w.inputs.racy || racyStamps(lc.start, w.dirs, w.ignores) {
		return
	}
	c := &untrackedCache{key: untrackedKey(w.inputs), excludesFile: w.excludesFile, dirs: w.dirs, ignores: w.ignores, kept: kept}
	if old := lc.cache; old != nil {
		// Only the changed directories were walked and listed again:
		// the rest is the old cache's.
		keep := func(list []stampedPath) []stampedPath {
			var out []stampedPath
			for _, p := range list {
				if !lc.relisted(p.path) {
					out = append(out, p)
				}
			}
			return out
		}
		byPath := func(a, b stampedPath) int { return strings.Compare(a.path, b.path) }
		c.dirs = slices.SortedFunc(slices.Values(append(keep(old.dirs), w.dirs...)), byPath)
		c.ignores = slices.SortedFunc(slices.Values(append(keep(old.ignores), w.ignores...)), byPath)
		if len(c.dirs) > maxCachedDirs {
			return
		}
	}
	// Best effort: without it, git lists again next time.
	_ = saveUntracked(lc.file, c)
}
