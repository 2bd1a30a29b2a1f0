// Package sync copies a checkout to a box over an established SSH
// connection.
//
// FileSet decides what is copied (a git checkout's tracked and untracked,
// non-ignored files, as they are in the working tree) and rejects paths and
// symlinks that would land outside the destination. Push compares the
// checkout's manifest (per file: mode, size, link target, SHA-256 of the
// content) with the one the box keeps from the last push and streams only
// what changed as one tar archive into `tar -xf -` on the box, so any POSIX
// box with sh and tar works and nothing but git is needed on the client.
// A file with holes (1 MiB or more of them) is sent as a sparse entry in
// the PAX format GNU tar and bsdtar extract with its holes (see
// writeSparse); a box whose tar knows neither would extract it wrongly.
//
// The box keeps the manifest of what crabbox synced and its fingerprint
// beside RemoteDir, in StateDir(RemoteDir), where commands run in
// RemoteDir do not see them. A push whose fingerprint the box already
// has transfers nothing. A later push deletes the paths of the previous
// manifest that are no longer in the file set, and nothing else: files the
// command created on the box stay. Pushes into one RemoteDir take a lock on
// the box, so concurrent pushes leave one of the trees with its correct
// fingerprint.
//
// Listing and hashing run on GOMAXPROCS-1 goroutines (at least one), so
// that the network reads they usually run beside, an SSH handshake above
// all, find an idle P: a program that wants every processor scanning sets
// GOMAXPROCS one above their number, as the crabbox command does while it
// starts (and not for a transfer, where an idle P costs more than it gives).
package sync

import (
	"archive/tar"
	"bufio"
	"cmp"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/crabbox-dev/crabbox/internal/remote"

	"golang.org/x/crypto/ssh"
)

// Options says what Push copies where.
type Options struct {
	// Root is the local directory to copy, usually a git checkout's top.
	Root string
	// RemoteDir is the directory on the box to copy into; it is created
	// if missing. A relative path is relative to the login directory.
	// Prepare does without it, so that the local half of a push can run
	// before the box is known (see Prepared.SetRemoteDir).
	RemoteDir string
	// Progress, if set, is called after each file is sent with the
	// number of files and bytes of content sent so far.
	Progress func(files int, bytes int64)
	// Limits are the guardrails checked before anything moves; nil means
	// DefaultLimits. The Max limits apply to the whole file set, in
	// Prepare; the Warn limits to what a push is about to send, once the
	// box's state is known (see Limits). Force ignores the Max limits.
	Limits *Limits
	Force  bool
	// Warn, if set, receives the warning of a push about to send more than
	// a Warn limit, of symlinks leading outside Root (see
	// RefuseOutsideLinks), of a RemoteDir found deleted or replaced on the
	// box (which the push then sends whole; see StateDir), and of a local
	// cache that could not be saved (the latter from a goroutine of the
	// push's own, while Push runs).
	Warn func(string)
	// CacheFile, if set, is a local file caching content hashes by path,
	// size, mtime and inode, so that unchanged files are not read again.
	// Files next to it, named after it, keep the fingerprint of the last
	// listing (.listing), what the excludes kept of git's listings of the
	// checkout (.untracked) and the manifest of the last push (.pushed).
	CacheFile string
	// Checksum verifies the content of the files on the box (sha256sum or
	// shasum -a 256 there) instead of trusting the box's manifest; files
	// whose content differs are sent again. It also reads every local file
	// again instead of trusting the hash cache, which knows files by size,
	// mtime and inode: an edit that kept all three is sent only with
	// Checksum (or FullResync). It never skips.
	Checksum bool
	// FullResync deletes everything the previous manifest lists and sends
	// the whole file set again.
	FullResync bool
	// Exclude are gitignore-syntax patterns (the config's sync.exclude)
	// leaving files out of the sync, after the built-in excludes and
	// Root's .crabboxignore; see FileSetWith.
	Exclude []string
	// RefuseOutsideLinks fails the push on a symlink whose target is
	// absolute or leads outside Root; by default such a link is synced as
	// a link (its target is neither read nor sent) and Warn is told once.
	// SkipSubmodules leaves git submodules out; by default the tracked
	// files of initialised submodules are synced. See FileSet.
	RefuseOutsideLinks bool
	SkipSubmodules     bool
	// Changes, if set with a CacheFile, is asked before the checkout is
	// listed. When its token is the one the last listing was made under
	// (and nothing else that decides the file set changed), Prepare takes
	// that listing's fingerprint and lists nothing: an untouched checkout
	// costs the same whatever its size. When it is also a ChangeJournal
	// that names the few files changed since that listing, only those are
	// looked at again (an lstat each, one git call for new ones); the
	// listing is what a full one would find. Checksum and FullResync list
	// always.
	Changes ChangeClock

	// lockTries bounds the waits for another push's lock on the box; zero
	// means defaultLockTries (tests shorten it).
	lockTries int
	// sessionOpened, if set, is called for each SSH session a push opens
	// (tests count them).
	sessionOpened func()
	// eagerFiles, when not zero, replaces eagerHashFiles (tests set -1 to
	// hash nothing before the session).
	eagerFiles int
	// stateRead, if set, learns whether the box left its manifest out as
	// known (tests).
	stateRead func(known bool)
	// prevRead, if set, learns where the box's manifest came from:
	// "snapshot", "pushed" or "box".
	prevRead func(from string)
	// opened, if set, is called with the path of each regular file the
	// transfer opened, before it reads it (tests).
	opened func(path string)
	// tar, if set, is the box's tar command instead of tar, and df its
	// df instead of df (tests).
	tar, df string
	// paced, if set, learns how a paced transfer step answered: "dots",
	// "none", or "" when it said nothing (tests).
	paced func(word string)
	// paceMaxRTT, when not zero, replaces paceMaxRTT (tests: a loaded
	// machine's loopback may take longer).
	paceMaxRTT time.Duration
	// listingStart, if set, replaces the listings' start time, which
	// decides which directory stamps are too recent to cache (tests).
	listingStart time.Time
	// maxState, when not zero, replaces maxManifestSize as the bound of
	// the box's state files (tests).
	maxState int64
}

// Stats describes a finished push.
type Stats struct {
	// Bytes is the total size of the regular files' content sent.
	Bytes int64
	// Total is the number of files and symlinks in the file set.
	Total int
	// Sent is the number of files and symlinks sent.
	Sent int
	// Hashed is the number of files read to hash them: those the local hash
	// cache did not know as they are.
	Hashed int
	// Deleted is the number of previously synced paths deleted.
	Deleted int
	// Skipped reports that the box already held the file set (equal
	// fingerprints) and nothing was transferred.
	Skipped bool
	// Unlisted reports that the change clock (Options.Changes) vouched
	// for the file set, so the checkout was not listed.
	Unlisted bool
	// Plan is the time to list and hash the file set, read the box's
	// state (waiting for another push's lock) and decide what to send; Transfer the time to stream the
	// archive; Apply the time the box took after the stream to finish
	// extracting and install the new manifest.
	Plan, Transfer, Apply time.Duration
	// Duration is the wall time of the whole push.
	Duration time.Duration
}

// Push copies the file set of opts.Root into opts.RemoteDir on the box,
// sending only what differs from the box's manifest, and deletes what the
// previous pushes copied that is no longer in the set. Files are sent as
// they are read, in one tar stream, never held in memory whole. Files that
// disappear locally while the push runs are left out; a file that grows is
// sent as it was when opened; one that shrinks while it is read is read
// again, a few times at most, after the others.
//
// Everything happens in one SSH session: a push whose fingerprint the box
// already has costs one round trip. Nothing is deleted or transferred when
// the file set is invalid or the box's manifest is malformed. If the
// transfer fails, the box may hold part of the new files, but it is marked
// so that the next push trusts only what it can, deletes what either push
// synced and never skips.
//
// Pushes to the same RemoteDir hold a lock on the box (a directory in
// StateDir(RemoteDir)) from reading the box's state to installing the new
// one, so concurrent pushes run one after the other.
//
// Push is Prepare followed by Prepared.Push.
func Push(ctx context.Context, client *ssh.Client, opts Options) (Stats, error) {
	p, err := Prepare(ctx, opts)
	if err != nil {
		return Stats{Duration: p.took}, err
	}
	return p.Push(ctx, client)
}

// Prepared is the local half of a push: the file set, checked against the
// guardrails, and what is known of its content. It needs no box, so a
// caller can prepare while it connects. A Prepared is used for one Push.
type Prepared struct {
	opts  Options
	took  time.Duration // spent in Prepare
	files []File
	// listed are the files' stamps as listed (zero for symlinks), and
	// stamps the regular files' by path, made once the hash cache is
	// wanted; digest is the SHA-256 of the listing (see listingDigest).
	listed []fileStamp
	stamps map[string]fileStamp
	digest string
	cache  *hashCache
	// fp is the fingerprint of the file set when it is known before
	// the session: from the listing file, or from local once every
	// hash is known. Empty means the box's state decides what to send.
	fp string
	// clock is the change clock's state to save once fp is known;
	// unlisted is set when fp came from the clock file and the checkout
	// was not listed (files stays nil until list), total is then the
	// number of files.
	clock    *clockState
	unlisted bool
	total    int
	// since and changed are the token of the last listing and the paths
	// a change journal says changed since (nil when it did not say).
	since   string
	sinceFP string // the fingerprint of the listing of since
	changed []string
	delta   bool // the listing was brought up to date by listDelta
	// prev is the manifest of the listing of since, when the snapshot
	// knew every hash: a box holding its fingerprint, prevFP, holds it.
	prev   []Entry
	prevFP string
	// local is the manifest, nil when fp came from the listing file;
	// misses are the indexes of its regular files whose hash is not
	// known yet.
	local  []Entry
	misses []int
	hashed int
}

// Files whose hashes the cache does not know are hashed before the
// session, so that an unchanged file set is recognised by its fingerprint,
// only when they are this few. A colder cache (a first sync) leaves the
// hashing to the transfer, which hashes what it sends as it sends it.
const (
	eagerHashFiles = 2000
	eagerHashBytes = 64 << 20
)

// Prepare lists the file set of opts.Root, checks it against the
// guardrails and finds what it can of its content without the box. When
// the CacheFile has seen this very listing (every path, mode, size, mtime
// and inode) before, the fingerprint is taken from there and no file or
// hash is read: an unchanged checkout costs a git listing and a stat per
// file.
func Prepare(ctx context.Context, opts Options) (*Prepared, error) {
	start := time.Now()
	p := &Prepared{opts: opts}
	defer func() { p.took = time.Since(start) }()
	fail := func(err error) (*Prepared, error) {
		if opts.RemoteDir == "" {
			return p, fmt.Errorf("sync %s: %w", opts.Root, err)
		}
		return p, fmt.Errorf("sync %s to %s: %w", opts.Root, opts.RemoteDir, err)
	}
	if opts.Root == "" {
		return fail(errors.New("no local root"))
	}
	if opts.RemoteDir != "" {
		if err := checkRemoteDir(opts.RemoteDir); err != nil {
			return fail(err)
		}
	}
	if opts.Changes != nil && opts.CacheFile != "" && !opts.Checksum && !opts.FullResync {
		if st, ok := p.unchanged(ctx); ok {
			p.fp, p.total, p.unlisted = st.fp, st.files, true
			if st.warning != "" && opts.Warn != nil {
				opts.Warn(st.warning)
			}
			return p, nil
		}
	}
	listed := false
	if p.changed != nil {
		switch err := p.listDelta(ctx); {
		case err == nil:
			listed = true
		case !errors.Is(err, errListAgain):
			return fail(err)
		}
	}
	if !listed {
		if err := p.list(ctx); err != nil {
			return fail(err)
		}
	}
	if opts.CacheFile != "" && p.local == nil {
		p.digest = listingDigest(p.files, p.listed)
		// Checksum compares content: neither the listing nor the hash
		// cache, which trust the files' stamps, may vouch for it.
		if !opts.Checksum {
			if p.fp = readListing(opts.CacheFile, p.digest); p.fp != "" {
				p.saveClock(nil)
				return p, nil
			}
		}
	}
	if p.local == nil {
		p.loadCache()
	}
	var missBytes int64
	for _, i := range p.misses {
		missBytes += p.local[i].Size
	}
	if opts.CacheFile == "" || (len(p.misses) <= cmp.Or(opts.eagerFiles, eagerHashFiles) && missBytes <= eagerHashBytes) {
		if err := p.hash(ctx, p.misses); err != nil {
			return fail(err)
		}
		// Saved by Push, once the box has answered.
		p.fp = fingerprint(p.local)
		p.saveClock(p.local)
	}
	return p, nil
}

// list lists the file set and checks it against the guardrails.
func (p *Prepared) list(ctx context.Context) error {
	opts := p.opts
	setOpts := FileSetOptions{Exclude: opts.Exclude, RefuseOutsideLinks: opts.RefuseOutsideLinks, SkipSubmodules: opts.SkipSubmodules, listingStart: opts.listingStart}
	setOpts.Warn = func(s string) {
		if p.clock != nil {
			p.clock.warning = s
		}
		if opts.Warn != nil {
			opts.Warn(s)
		}
	}
	if opts.CacheFile != "" {
		// The untracked cache pays off from a checkout's second listing
		// on. Building it walks every directory beside git's listing, a
		// third of a first listing's time; the first sync (often the only
		// one, of a fresh CI checkout) starts sooner without it.
		untracked := opts.CacheFile + untrackedSuffix
		if exists(untracked) || exists(opts.CacheFile) {
			setOpts.untrackedCache = untracked
		}
	}
	files, stamps, _, err := listFiles(ctx, opts.Root, runtime.GOOS == "windows", setOpts)
	if err != nil {
		return fmt.Errorf("list files of %s: %w", opts.Root, err)
	}
	if err := checkLimits(opts, files); err != nil {
		return err
	}
	p.files, p.listed, p.total, p.unlisted = files, stamps, len(files), false
	return nil
}

// unchanged asks the change clock and returns what the last listing found
// when nothing changed since it was made. Otherwise it keeps the token
// for saveClock, and, when a change journal named what changed since the
// last listing, those paths for listDelta.
func (p *Prepared) unchanged(ctx context.Context) (clockState, bool) {
	saved, ok := readClock(p.opts.CacheFile)
	token, changed, err := p.askClock(ctx, saved, ok)
	if err != nil || token == "" || strings.ContainsAny(token, " \t\n") {
		return clockState{}, false
	}
	m, err := newMatcher(p.opts.Root, p.opts.Exclude)
	if err != nil {
		return clockState{}, false
	}
	excludesFile := saved.excludesFile
	if !ok {
		if excludesFile, err = resolveExcludesFile(ctx, p.opts.Root); err != nil {
			return clockState{}, false
		}
	}
	key, keyed := clockKey(p.opts.Root, excludesFile, p.opts, m.source)
	if !keyed {
		return clockState{}, false
	}
	if ok && saved.token == token && saved.key == key {
		return saved, true
	}
	p.clock = &clockState{token: token, key: key, excludesFile: excludesFile}
	if ok && saved.key == key && changed != nil {
		p.since, p.sinceFP, p.changed = saved.token, saved.fp, changed
	}
	return clockState{}, false
}

// askClock returns the change clock's token and, when the clock is a
// journal that can name them, the paths changed since the saved token
// (non-nil, possibly empty).
func (p *Prepared) askClock(ctx context.Context, saved clockState, ok bool) (string, []string, error) {
	if j, isJournal := p.opts.Changes.(ChangeJournal); isJournal && ok {
		token, paths, all, err := j.Changes(ctx, saved.token)
		if err != nil || all {
			return token, nil, err
		}
		return token, append(make([]string, 0, len(paths)), paths...), nil
	}
	token, err := p.opts.Changes.Clock(ctx)
	return token, nil, err
}

// saveClock saves the change clock's token with the fingerprint of the
// listing made after it, once; entries, nil or the manifest of the listing
// in its order, give the snapshot the hashes they know.
func (p *Prepared) saveClock(entries []Entry) {
	if p.clock == nil || p.fp == "" || p.unlisted {
		return
	}
	st := *p.clock
	st.fp, st.files = p.fp, len(p.files)
	p.clock = nil
	if _, isJournal := p.opts.Changes.(ChangeJournal); isJournal {
		// Before the clock file: a snapshot is used only with the
		// clock's token, so a clock file never names a stale one.
		if err := writeSnapshot(p.opts.CacheFile, st.token, p.files, p.listed, entries); err != nil {
			p.warn(err)
			return
		}
	}
	p.warn(writeClock(p.opts.CacheFile, st))
}

func checkRemoteDir(dir string) error {
	switch {
	case dir == "":
		return errors.New("no remote directory")
	case strings.IndexByte(dir, 0) >= 0:
		return errors.New("remote directory contains a NUL byte")
	}
	// crabbox's state lives beside the directory (see StateDir).
	switch _, base := splitRemoteDir(dir); base {
	case "/", ".", "..":
		return fmt.Errorf("remote directory %q has no name of its own; name a directory below it", dir)
	case stateParent:
		return fmt.Errorf("remote directory %q: %s is the name of crabbox's state directory; choose another name", dir, stateParent)
	}
	return nil
}

// Root is the local directory the file set was listed from.
func (p *Prepared) Root() string { return p.opts.Root }

// SetRemoteDir sets the directory on the box that UnchangedCheck and Push
// use, for a Prepare made without one (Options.RemoteDir).
func (p *Prepared) SetRemoteDir(dir string) error {
	if err := checkRemoteDir(dir); err != nil {
		return fmt.Errorf("sync %s: %w", p.opts.Root, err)
	}
	p.opts.RemoteDir = dir
	return nil
}

// stampsByPath indexes the regular files' stamps by path.
func stampsByPath(files []File, stamps []fileStamp) map[string]fileStamp {
	m := make(map[string]fileStamp, len(files))
	for i, f := range files {
		if f.LinkTarget == "" {
			m[f.Path] = stamps[i]
		}
	}
	return m
}

// loadCache loads the hash cache and makes the manifest of what it knows,
// the misses left to hash. With Checksum, it knows nothing: every file is
// read again.
func (p *Prepared) loadCache() {
	p.stamps = stampsByPath(p.files, p.listed)
	p.cache = loadCache(p.opts.CacheFile)
	if p.cache != nil {
		p.cache.stamps = p.stamps
		p.cache.rehash = p.opts.Checksum
	}
	p.local, p.misses = cachedManifest(p.files, p.cache)
}

// UnchangedCheck returns a sh condition that holds on the box exactly
// when the box already has this file set in RemoteDir (the check a push
// makes first, without the lock: the box's fingerprint, no push cut
// short, and the Marker in RemoteDir, which a workdir deleted or replaced
// on the box has lost), so that a caller about to run a command
// there can fold it into the command's session (run.Request.Precondition)
// and push only when it fails.
//
// It reports false when the box most likely differs, and checking first
// would only add a round trip: the checkout's listing is not the one the
// CacheFile last saw synced. It also reports false when Checksum or
// FullResync ask for more than the check, and without a RemoteDir.
func (p *Prepared) UnchangedCheck() (string, bool) {
	if p.fp == "" || p.local != nil || p.opts.Checksum || p.opts.FullResync || p.opts.RemoteDir == "" {
		return "", false
	}
	state, fp := StateDir(p.opts.RemoteDir), remote.Quote(p.fp)
	return "{ read -r crabbox_have <" + remote.Quote(path.Join(state, fingerprintFile)) + "; } 2>/dev/null && " +
		"[ \"$crabbox_have\" = " + fp + " ] && [ ! -e " + remote.Quote(path.Join(state, pendingFile)) + " ] && " +
		"{ read -r crabbox_have <" + remote.Quote(path.Join(p.opts.RemoteDir, Marker)) + "; } 2>/dev/null && " +
		"[ \"$crabbox_have\" = " + fp + " ]", true
}

// Holds reports whether the file set has a file in dir (relative to the
// root, slash-separated; "" or "." is the root itself), so that a push
// creates dir on the box. A directory that holds nothing the sync sends
// (an empty one, which git does not track, or one excluded) is not
// created. When the change clock spared Prepare the listing, Holds lists
// the checkout (bounded by ctx); a listing that fails answers true, so
// that no caller claims the sync left dir out.
func (p *Prepared) Holds(ctx context.Context, dir string) bool {
	dir = path.Clean(dir)
	if dir == "." || dir == "" {
		return true
	}
	if p.unlisted && p.list(ctx) != nil {
		return true
	}
	for _, f := range p.files {
		if strings.HasPrefix(f.Path, dir+"/") {
			return true
		}
	}
	return false
}

// Unchanged returns the Stats of a push that found the box up to date,
// for a caller whose UnchangedCheck held on the box.
func (p *Prepared) Unchanged() Stats {
	return Stats{Total: p.total, Hashed: p.hashed, Skipped: true, Unlisted: p.unlisted, Plan: p.took, Duration: p.took}
}

// hash reads and hashes the manifest's entries idx, which must be misses.
func (p *Prepared) hash(ctx context.Context, idx []int) error {
	n, err := hashEntries(ctx, p.opts.Root, p.local, idx, p.cache)
	p.hashed += n
	if err != nil {
		return err
	}
	hashed := make(map[int]bool, len(idx))
	for _, i := range idx {
		hashed[i] = true
	}
	p.misses = slices.DeleteFunc(p.misses, func(i int) bool { return hashed[i] })
	return nil
}

// manifest returns the manifest with the hashes of every file that could
// be equal to its trusted entry on the box; the others, which are sent,
// are hashed as they are sent.
func (p *Prepared) manifest(ctx context.Context, box *boxState) ([]Entry, error) {
	if p.unlisted {
		// The change clock vouched for the fingerprint, but the box
		// differs: what to send needs the listing after all.
		if err := p.list(ctx); err != nil {
			return nil, err
		}
	}
	if p.local == nil {
		// Only the fingerprint was known, and the box differs.
		p.loadCache()
	}
	var maybeSame []int
	for _, i := range p.misses {
		e := p.local[i]
		if t, ok := box.lookup(e.Path); ok && t.Mode == e.Mode && t.Size == e.Size && t.Link == "" {
			maybeSame = append(maybeSame, i)
		}
	}
	if err := p.hash(ctx, maybeSame); err != nil {
		return nil, err
	}
	return p.local, nil
}

// sent records the hash of a file the transfer read and hashed while
// sending it, for the cache when the file was still as listed.
func (p *Prepared) sent(e Entry, st fileStamp) {
	if listed, ok := p.stamps[e.Path]; ok && listed == st && p.cache != nil {
		p.cache.store(e.Path, e.Size, st.mtime, st.ino, e.SHA256)
	}
}

// remember saves the hash cache and, when every file's mtime is old enough
// to trust, fp as the fingerprint of this listing, whose manifest is
// entries.
func (p *Prepared) remember(fp string, entries []Entry) {
	if p.cache == nil {
		return
	}
	p.warn(p.cache.save())
	if p.digest != "" && !p.cache.racyIn(p.stamps) {
		p.warn(writeListing(p.opts.CacheFile, p.digest, fp))
	}
	if p.fp == "" {
		p.fp = fp
		p.saveClock(entries)
	}
}

// warn reports a failure to save one of the local caches, which only
// makes the next push slower.
func (p *Prepared) warn(err error) {
	if err != nil && p.opts.Warn != nil {
		p.opts.Warn(fmt.Sprintf("could not save the sync cache %s: %v", p.opts.CacheFile, err))
	}
}

// Push sends the prepared file set to the box; see the package function
// Push.
func (p *Prepared) Push(ctx context.Context, client *ssh.Client) (Stats, error) {
	start := time.Now()
	if err := checkRemoteDir(p.opts.RemoteDir); err != nil {
		return Stats{Total: p.total}, fmt.Errorf("sync %s: %w", p.opts.Root, err)
	}
	stats := Stats{Total: p.total}
	s := &session{prep: p, opts: p.opts, stats: &stats, planStart: start, prepared: p.took}
	err := s.run(ctx, client)
	if err == nil && stats.Skipped && p.local != nil {
		// The listing was new (files touched, say) but the box had its
		// manifest: remember what was hashed to learn that.
		p.remember(p.fp, p.local)
	}
	stats.Hashed, stats.Unlisted, stats.Total = p.hashed, p.unlisted, p.total
	stats.Duration = s.prepared + time.Since(start)
	if err != nil {
		return stats, fmt.Errorf("sync %s to %s: %w", p.opts.Root, p.opts.RemoteDir, err)
	}
	return stats, nil
}

// session is one push's conversation with the box.
type session struct {
	prep      *Prepared
	opts      Options
	stats     *Stats
	planStart time.Time
	// prepared is the time Prepare took, before the session.
	prepared time.Duration

	sess   *ssh.Session
	stdin  io.WriteCloser
	stdout *bufio.Reader
	stderr *tail
	// saved, if set, is closed when the hash cache, saved while the
	// archive's end is sent, is written.
	saved chan struct{}
	// pushed, if set, is the pushed file, read while the box answers.
	pushed *pushedRead
	// drained, once the transfer step has started, is closed when the
	// box's output, which the pacer reads or else is discarded, has
	// ended: nothing the box's tar prints (a TAR_OPTIONS with -v lists
	// every file) may fill the session's window and stall it.
	drained chan struct{}
}

// pushedRead is the pushed file read for a fingerprint, once done is
// closed.
type pushedRead struct {
	done    chan struct{}
	fp      string
	entries []Entry
	err     error
}

func (s *session) run(ctx context.Context, client *ssh.Client) error {
	fp := cmp.Or(s.prep.fp, "-") // "-" is no fingerprint: the box differs
	mode := "quick"
	if s.opts.Checksum || s.opts.FullResync {
		mode = "full"
	}
	nonce := make([]byte, 8)
	if _, err := rand.Read(nonce); err != nil {
		return err
	}

	sess, err := remote.NewSession(ctx, client)
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return fmt.Errorf("open SSH session: %w", err)
	}
	if s.opts.sessionOpened != nil {
		s.opts.sessionOpened()
	}
	s.sess = sess
	defer sess.Close()
	stop := context.AfterFunc(ctx, func() { sess.Close() })
	defer stop()
	s.stderr = &tail{}
	sess.Stderr = s.stderr
	if s.stdin, err = sess.StdinPipe(); err != nil {
		return err
	}
	stdout, err := sess.StdoutPipe()
	if err != nil {
		return err
	}
	s.stdout = bufio.NewReaderSize(stdout, 64<<10)
	known := ""
	if s.opts.CacheFile != "" {
		known = pushedFingerprint(s.opts.CacheFile + pushedSuffix)
	}
	if known != "" && s.prep.local != nil && known != s.prep.prevFP {
		// The listing is new, so the box most likely differs, and
		// holds the pushed manifest if it holds the pushed fingerprint:
		// read it while the box answers.
		r := &pushedRead{done: make(chan struct{}), fp: known}
		s.pushed = r
		go func() {
			defer close(r.done)
			r.entries, r.err = loadPushed(s.opts.CacheFile+pushedSuffix, known)
		}()
		defer func() { <-r.done }()
	}
	if err := sess.Start(sessionCommand(s.opts.RemoteDir, fp, mode, hex.EncodeToString(nonce), cmp.Or(s.opts.lockTries, defaultLockTries), known, s.opts.df)); err != nil {
		return fmt.Errorf("start sync on the box: %w", err)
	}

	err = s.converse(ctx, client)
	if err != nil && !errors.Is(err, errRemote) {
		// A local failure aborts: the box stops at the end of its
		// input, before installing anything.
		sess.Close()
	} else {
		s.stdin.Close()
	}
	applyStart := time.Now()
	waitErr := sess.Wait()
	if s.drained != nil {
		// The box's output ends with the session.
		sess.Close()
		<-s.drained
	}
	if s.saved != nil {
		<-s.saved
	}
	if s.stats.Transfer != 0 {
		s.stats.Apply = time.Since(applyStart)
	}
	switch {
	case ctx.Err() != nil:
		return ctx.Err()
	case err != nil && !errors.Is(err, errRemote):
		return err
	case waitErr != nil:
		return s.boxError(waitErr)
	case err != nil:
		return s.boxError(err)
	}
	return nil
}

// boxError describes a failure on the box's side: a full disk as such,
// anything else with the end of the box's stderr.
func (s *session) boxError(err error) error {
	if at, free, known, full := diskFull(string(s.stderr.b)); full {
		return diskFullError("box", s.opts.RemoteDir, at, free, known)
	}
	return fmt.Errorf("on the box: %w%s", err, s.stderr.suffix())
}

// strayed reports whether the remote directory is not the one the box's
// state describes, from what its Marker holds (mark): a box whose marker
// is missing, holds something else than a fingerprint or another
// fingerprint than the box's (boxFP), or, where the box has none, than
// that of its manifest (prevFP, called only then). An empty marker is the
// directory of a push that was cut short (dirty), as the pending file
// says.
func strayed(mark, boxFP string, dirty bool, prevFP func() string) bool {
	switch {
	case mark == markNone, mark == markOther:
		return true
	case mark == markEmpty:
		return !dirty
	case boxFP != "":
		return mark != boxFP
	}
	return mark != prevFP()
}

// warnStrayed tells Warn that the push found the remote directory missing
// or replaced, so that it trusts nothing there and sends the whole tree.
func (s *session) warnStrayed() {
	if s.opts.Warn != nil {
		s.opts.Warn(fmt.Sprintf("%s is not the copy crabbox synced (deleted or replaced since): sending the whole tree again", s.opts.RemoteDir))
	}
}

// errProtocol marks output from the box that does not follow the protocol.
var errProtocol = errors.New("unexpected output from the box")

func (s *session) readLine() (string, error) {
	line, err := s.stdout.ReadString('\n')
	if err != nil {
		if errors.Is(err, io.EOF) {
			// The box ended the session early: its reason is on stderr.
			return "", fmt.Errorf("%w: the session ended early", errRemote)
		}
		return "", err
	}
	return strings.TrimSuffix(line, "\n"), nil
}

// stateFile reports whether name is one of the box's state files the
// client reads.
func stateFile(name string) bool {
	return name == "manifest" || name == "pending"
}

// boxFiles is what sessionScript reports of the box's state: its
// fingerprint ("" for none), what the remote directory's Marker holds,
// and the contents of its manifest and pending files, absent from the map
// when the box has none (or, for the manifest, when known).
type boxFiles struct {
	fingerprint string
	mark        string
	files       map[string][]byte
	// known reports that the box left out its manifest because its
	// fingerprint is the pushed file's.
	known bool
}

// readState reads what sessionScript prints of the box's state: the line
// with the fingerprint and the marker and naming the files that exist, wc -c's line for
// each (and its total line for more than one), then their contents in that
// order.
func (s *session) readState() (boxFiles, error) {
	line, err := s.readLine()
	if err != nil {
		return boxFiles{}, err
	}
	rest, ok := strings.CutPrefix(line, "crabbox-sync state ")
	names := strings.Fields(rest)
	if !ok || len(names) < 2 {
		return boxFiles{}, fmt.Errorf("%w: %q, want the state", errProtocol, line)
	}
	var box boxFiles
	if names[0] != "-" {
		if !isHash(names[0]) {
			return boxFiles{}, fmt.Errorf("%w: %q, want the state", errProtocol, line)
		}
		box.fingerprint = names[0]
	}
	switch box.mark = names[1]; box.mark {
	case markNone, markEmpty, markOther:
	default:
		if !isHash(box.mark) {
			return boxFiles{}, fmt.Errorf("%w: %q, want the state", errProtocol, line)
		}
	}
	names = names[2:]
	if n := len(names); n > 0 && names[n-1] == "known" {
		names, box.known = names[:n-1], true
	}
	sizes := make([]int64, len(names))
	for i, name := range names {
		if !stateFile(name) || slices.Index(names, name) != i {
			return boxFiles{}, fmt.Errorf("%w: %q", errProtocol, line)
		}
		wc, err := s.readLine()
		if err != nil {
			return boxFiles{}, err
		}
		f := strings.Fields(wc)
		if len(f) != 2 || f[1] != name {
			return boxFiles{}, fmt.Errorf("%w: %q, want the size of %s", errProtocol, wc, name)
		}
		n, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil || n < 0 {
			return boxFiles{}, fmt.Errorf("%w: %q, want the size of %s", errProtocol, wc, name)
		}
		if limit := cmp.Or(s.opts.maxState, maxManifestSize); n > limit {
			return boxFiles{}, fmt.Errorf("%s on the box is larger than %d bytes; remove it to start over", path.Join(StateDir(s.opts.RemoteDir), name), limit)
		}
		sizes[i] = n
	}
	if len(names) > 1 {
		if _, err := s.readLine(); err != nil { // wc's total
			return boxFiles{}, err
		}
	}
	box.files = make(map[string][]byte, len(names))
	for i, name := range names {
		data := make([]byte, sizes[i])
		if _, err := io.ReadFull(s.stdout, data); err != nil {
			return boxFiles{}, fmt.Errorf("read %s from the box: %w", name, err)
		}
		box.files[name] = data
	}
	return box, nil
}

// fetchManifest asks the box for its manifest after all: the pushed file
// that matched its fingerprint could not be read.
func (s *session) fetchManifest() ([]byte, error) {
	if _, err := (remoteWriter{s.stdin}).Write(step(manifestStep)); err != nil {
		return nil, err
	}
	line, err := s.readLine()
	if err != nil {
		return nil, err
	}
	size, ok := strings.CutPrefix(line, "crabbox-sync manifest ")
	if !ok {
		return nil, fmt.Errorf("%w: %q, want the manifest", errProtocol, line)
	}
	if size == "-" {
		return nil, nil
	}
	n, err := strconv.ParseInt(size, 10, 64)
	if err != nil || n < 0 || n > maxManifestSize {
		return nil, fmt.Errorf("%w: %q", errProtocol, line)
	}
	data := make([]byte, n)
	if _, err := io.ReadFull(s.stdout, data); err != nil {
		return nil, fmt.Errorf("read manifest from the box: %w", err)
	}
	return data, nil
}

// converse runs the protocol of sessionScript.
func (s *session) converse(ctx context.Context, client *ssh.Client) error {
	line, err := s.readLine()
	if err != nil {
		return err
	}
	switch line {
	case "crabbox-sync same":
		s.stats.Skipped = true
		s.stats.Plan = s.prepared + time.Since(s.planStart)
		return nil
	case "crabbox-sync differ":
	default:
		return fmt.Errorf("%w: %q", errProtocol, line)
	}

	state, err := s.readState()
	if err != nil {
		return err
	}
	if s.opts.stateRead != nil {
		s.opts.stateRead(state.known)
	}
	pendingData, dirty := state.files["pending"]
	manifestData, hasManifest := state.files["manifest"]
	var prev []Entry
	from := "box"
	if state.known && s.prep.prevFP == state.fingerprint && fingerprint(s.prep.prev) == state.fingerprint {
		// The box has the manifest of the last listing, which the
		// snapshot kept: no file to read.
		prev, from = s.prep.prev, "snapshot"
	} else if state.known {
		// The box has the manifest of the last push from here.
		from = "pushed"
		if prev, err = s.loadPushed(state.fingerprint); err != nil {
			from = "box"
			if manifestData, err = s.fetchManifest(); err != nil {
				return err
			}
		}
	}
	if s.opts.prevRead != nil {
		s.opts.prevRead(from)
	}
	if prev == nil {
		if prev, err = parseManifest(manifestData); err != nil {
			return fmt.Errorf("%s/%s on the box is malformed (%w); nothing was changed; remove it to start over", s.opts.RemoteDir, manifestFile, err)
		}
	}
	var untrusted []string
	if dirty {
		// An interrupted push: what it may have changed is not trusted,
		// and is deleted unless it is still in the file set.
		if untrusted, err = parseChanges(pendingData); err != nil {
			// Empty or cut short (the push stopped before or while
			// sending its plan), or an earlier crabbox's plan.
			untrusted = untrustedByPlan(prev, pendingData)
		}
	}
	if (hasManifest || state.known || dirty) && strayed(state.mark, state.fingerprint, dirty, func() string { return fingerprint(prev) }) {
		s.warnStrayed()
		prev, untrusted = nil, nil
	}
	box := newBoxState(prev, untrusted)
	// Hash what the box may already hold as it is; the rest is hashed
	// as it is sent.
	local, err := s.prep.manifest(ctx, box)
	if err != nil {
		return err
	}
	send, del, err := s.plan(ctx, local, box, s.verify)
	if err != nil {
		return err
	}

	transferStart := time.Now()
	defer func() { s.stats.Transfer = time.Since(transferStart) }()
	var w io.Writer = remoteWriter{s.stdin}
	// An archive that fits in the pace window is not worth the box's
	// asking which tar it has, nor is a link the window would slow.
	pace := archiveSize(local, send) > paceWindow && nearBox(ctx, client, cmp.Or(s.opts.paceMaxRTT, paceMaxRTT))
	if _, err := w.Write(step(transferStep(del, cmp.Or(s.opts.tar, "tar"), true, pace, holdsDir(local)))); err != nil {
		return err
	}
	if pace {
		p := newPacer(ctx, w, s.stdout, s.opts.paced)
		w, s.drained = p, p.done
	} else {
		s.drained = make(chan struct{})
		go func() {
			defer close(s.drained)
			_, _ = io.Copy(io.Discard, s.stdout)
		}()
	}
	return s.writeArchive(ctx, w, local, send, del, box)
}

// archiveSize is about the size of the archive sending local[send]: each
// file's header and content, in blocks.
func archiveSize(local []Entry, send []int) int64 {
	var n int64
	for _, i := range send {
		n += 512 + (local[i].Size+511)&^511
	}
	return n
}

// plan decides what a push sends (indexes of local) and deletes: with
// FullResync it trusts nothing the box holds and deletes every synced path,
// even those sent again; with Checksum it trusts what verify confirms by
// content. It warns about a large sync and ends the plan's timing.
func (s *session) plan(ctx context.Context, local []Entry, box *boxState, verify func(context.Context, []Entry, *boxState) ([]Entry, error)) (send []int, del []string, err error) {
	switch {
	case s.opts.FullResync:
		box.trusted = nil
	case s.opts.Checksum:
		if box.trusted, err = verify(ctx, local, box); err != nil {
			return nil, nil, err
		}
	}
	send, del = box.diff(local)
	if s.opts.FullResync {
		del = box.synced
	}
	s.warnLarge(local, send)
	s.stats.Deleted = len(del)
	s.stats.Plan = s.prepared + time.Since(s.planStart)
	return send, del, nil
}

// loadPushed returns the pushed file's entries, which must be those of
// fingerprint fp, from the read started with the session when there is one.
func (s *session) loadPushed(fp string) ([]Entry, error) {
	if r := s.pushed; r != nil && r.fp == fp {
		<-r.done
		return r.entries, r.err
	}
	return loadPushed(s.opts.CacheFile+pushedSuffix, fp)
}

// untrustedByPlan is what an interrupted push whose pending file is not a
// list of changes may have changed, given the box's manifest prev: with an
// earlier crabbox's plan (the whole manifest it meant to install), the
// paths of both on which they do not agree, and those only it names;
// otherwise everything.
func untrustedByPlan(prev []Entry, plan []byte) []string {
	pending, err := parseManifest(plan)
	if err != nil || len(pending) == 0 {
		out := make([]string, len(prev))
		for i, e := range prev {
			out[i] = e.Path
		}
		return out
	}
	box := newBoxState(prev, nil)
	byPath := make(map[string]bool, len(pending))
	var out []string
	for _, e := range pending {
		byPath[e.Path] = true
		if t, ok := box.lookup(e.Path); !ok || !t.same(e) {
			out = append(out, e.Path)
		}
	}
	for _, e := range prev {
		if !byPath[e.Path] {
			out = append(out, e.Path)
		}
	}
	return out
}

// verify hashes on the box the files the trusted manifest would leave
// alone and returns the entries the box's content confirms, sorted.
func (s *session) verify(ctx context.Context, local []Entry, box *boxState) ([]Entry, error) {
	var check []string
	for _, e := range local {
		if t, ok := box.lookup(e.Path); ok && t.same(e) && e.Link == "" {
			check = append(check, e.Path)
		}
	}
	if _, err := (remoteWriter{s.stdin}).Write(step(hashStep(check))); err != nil {
		return nil, err
	}
	var lines []string
	for {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		line, err := s.readLine()
		if err != nil {
			return nil, err
		}
		if line == hashedMarker {
			break
		}
		lines = append(lines, line)
	}
	sums := parseHashes(lines)
	var verified []Entry // sorted: check is
	for _, p := range check {
		if t, _ := box.lookup(p); sums[p] == t.SHA256 {
			verified = append(verified, t)
		}
	}
	return verified, nil
}

// errRemote marks a failure to write to the box, whose reason is on the
// box's side.
var errRemote = errors.New("the box stopped reading the archive")

// remoteWriter tags write errors with errRemote.
type remoteWriter struct{ w io.Writer }

func (r remoteWriter) Write(p []byte) (int, error) {
	n, err := r.w.Write(p)
	if err != nil {
		err = fmt.Errorf("%w: %w", errRemote, err)
	}
	return n, err
}

// writeArchive writes the archive of a push: the plan (pendingFile), the
// files to send, then the new manifest and fingerprint, describing what was
// actually sent.
func (s *session) writeArchive(ctx context.Context, w io.Writer, local []Entry, send []int, del []string, box *boxState) error {
	root, err := openRoot(s.opts.Root)
	if err != nil {
		return err
	}
	defer root.close()
	buf := make([]byte, copyBuffer)
	bw := bufio.NewWriterSize(w, 256<<10)
	_, base := splitRemoteDir(s.opts.RemoteDir)
	tw := &archive{tw: tar.NewWriter(bw), w: bw, base: base}
	// Whole seconds: tar.Writer rounds to the nearest one, which can lie
	// ahead of the box's clock, and GNU tar then warns on stderr of a "time
	// stamp in the future", burying the reason of a push that fails.
	now := time.Now().Truncate(time.Second)
	changes := make([]string, 0, len(send)+len(del))
	for _, i := range send {
		changes = append(changes, local[i].Path)
	}
	if err := tw.addState(pendingFile, encodeChanges(append(changes, del...)), now); err != nil {
		return err
	}
	final := make([]Entry, len(local))
	copy(final, local)
	drop := map[int]bool{}
	clean := true     // every file sent as listed
	rehashed := false // a file's content hash learnt or changed while sending
	// sendOne adds local[i] to the archive; it reports a file that shrank
	// while it was read, whose entry is padded and must be sent again.
	sendOne := func(i int) (shrank bool, err error) {
		if err := ctx.Err(); err != nil {
			return false, err
		}
		e := &final[i]
		n, sum, st, ok, err := writeFile(tw, root, *e, buf, s.opts.opened)
		if errors.Is(err, errShrank) {
			clean = false
			return true, nil
		}
		if err != nil {
			return false, err
		}
		if !ok {
			clean = false
			// Vanished locally: the box keeps what it had.
			switch t, trustedOK := box.lookup(e.Path); {
			case trustedOK:
				*e = t
			case box.wasSynced(e.Path):
				// Unknown content, still crabbox's: never matches.
				*e = Entry{Path: e.Path, SHA256: unhashed}
			default:
				drop[i] = true
			}
			return false, nil
		}
		if e.Link == "" {
			if e.SHA256 == "" {
				s.prep.hashed++
			}
			rehashed = rehashed || e.SHA256 != sum || e.Size != n
			e.Size, e.SHA256 = n, sum
			s.prep.sent(*e, st)
		}
		s.stats.Sent++
		s.stats.Bytes += n
		if s.opts.Progress != nil {
			s.opts.Progress(s.stats.Sent, s.stats.Bytes)
		}
		return false, nil
	}
	var again []int // shrank while read: sent again, later in the archive
	for _, i := range send {
		shrank, err := sendOne(i)
		if err != nil {
			return err
		}
		if shrank {
			again = append(again, i)
		}
	}
	// A later entry of a path replaces the earlier one on the box.
	for try := 1; len(again) > 0; try++ {
		if try == sendTries {
			return fmt.Errorf("%q kept shrinking while it was sent (read %d times); sync again once it is written", final[again[0]].Path, sendTries)
		}
		retry := again
		again = nil
		for _, i := range retry {
			shrank, err := sendOne(i)
			if err != nil {
				return err
			}
			if shrank {
				again = append(again, i)
			}
		}
	}
	if len(drop) > 0 {
		kept := final[:0]
		for i, e := range final {
			if !drop[i] {
				kept = append(kept, e)
			}
		}
		final = kept
	}
	fp := s.prep.fp
	if fp == "" || rehashed || len(drop) > 0 {
		fp = fingerprint(final)
	}
	manifest := encodeManifest(final)
	if clean {
		// The local caches are saved while the manifest is sent and the
		// box extracts; run waits for them.
		s.saved = make(chan struct{})
		go func() {
			defer close(s.saved)
			s.prep.remember(fp, final)
			if s.opts.CacheFile != "" {
				s.prep.warn(savePushed(s.opts.CacheFile+pushedSuffix, fp, manifest))
			}
		}()
	}
	if err := tw.addState(manifestTmp, manifest, now); err != nil {
		return err
	}
	if err := tw.addState(fingerprintTmp, []byte(fp+"\n"), now); err != nil {
		return err
	}
	if err := tw.Close(); err != nil {
		return err
	}
	return bw.Flush()
}

// unhashed stands for the content hash of a file whose content is not
// known: it matches no file.
var unhashed = strings.Repeat("0", 64)

// archive writes the archive of a push, which the box extracts in the
// remote directory's parent: a file's entry is named BASE/PATH, a state
// file's .crabbox/BASE/NAME (see StateDir).
type archive struct {
	tw *tar.Writer
	w  io.Writer // under tw, for what tar.Writer cannot write (writeSparse)
	// base names the remote directory; empty, entries are named by path
	// alone (tests).
	base string
}

// name is the archive name of the file at p in the remote directory.
func (a *archive) name(p string) string {
	if a.base == "" {
		return p
	}
	return a.base + "/" + p
}

// WriteHeader writes the header of the file at hdr.Name in the remote
// directory.
func (a *archive) WriteHeader(hdr *tar.Header) error {
	hdr.Name = a.name(hdr.Name)
	return a.tw.WriteHeader(hdr)
}

func (a *archive) Write(p []byte) (int, error) { return a.tw.Write(p) }

func (a *archive) Close() error { return a.tw.Close() }

// addState adds the state file name with data.
func (a *archive) addState(name string, data []byte, now time.Time) error {
	hdr := &tar.Header{Typeflag: tar.TypeReg, Name: path.Join(stateParent, a.base, name), Mode: 0o644, Size: int64(len(data)), ModTime: now}
	if err := a.tw.WriteHeader(hdr); err != nil {
		return err
	}
	_, err := a.tw.Write(data)
	return err
}

// sendTries bounds the reads of a file that shrinks while it is sent.
const sendTries = 4

// errShrank marks a file that shrank while writeFile read it.
var errShrank = errors.New("shrank while it was sent")

// writeFile adds e to the archive and returns the content bytes written,
// their SHA-256 and the file's stamp when it was read. It reports false for
// a file that vanished since it was listed. A file that shrinks while it is
// read has its entry padded with zeros, to keep the archive whole, and
// fails with errShrank: it must be sent again. A file with holes is sent
// sparse (see writeSparse). buf is scratch space;
// opened, if set, is called once the file is open (tests).
func writeFile(tw *archive, root *rootDir, e Entry, buf []byte, opened func(string)) (int64, string, fileStamp, bool, error) {
	if e.Link != "" {
		fi, err := os.Lstat(filepath.Join(root.path, filepath.FromSlash(e.Path)))
		if errors.Is(err, fs.ErrNotExist) {
			return 0, "", fileStamp{}, false, nil
		}
		if err != nil {
			return 0, "", fileStamp{}, false, err
		}
		hdr := &tar.Header{
			Typeflag: tar.TypeSymlink,
			Name:     e.Path,
			Linkname: e.Link,
			Mode:     0o777,
			ModTime:  fi.ModTime().Truncate(time.Second), // as now in writeArchive
		}
		return 0, "", fileStamp{}, true, tw.WriteHeader(hdr)
	}

	// Open what was listed, and only that: a path swapped for a symlink
	// since must not make Push read outside the root.
	f, err := root.openFile(e.Path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return 0, "", fileStamp{}, false, nil
	case errors.Is(err, errNotRegular):
		return 0, "", fileStamp{}, false, fmt.Errorf("%q %w", e.Path, errNotRegular)
	case err != nil:
		return 0, "", fileStamp{}, false, err
	}
	defer f.Close()
	if regions := f.dataRegions(); regions != nil {
		if opened != nil {
			opened(e.Path)
		}
		return writeSparse(tw.tw, tw.w, f, e, tw.name(e.Path), regions, buf)
	}
	size := f.info.size
	// A name and size a plain ustar header holds (nearly every file) get
	// one written here, with the content after it, as tar.Writer would
	// write them, at less than half its cost (28 against 67 ms of a
	// 20,000-file first sync); the rest go through it (PAX records for
	// long or non-ASCII names).
	var body io.Writer = tw
	name, mtime := tw.name(e.Path), f.info.mtime/1e9
	raw := plainUstar(name, size, mtime)
	if raw {
		// Finish the previous entry first.
		if err := tw.tw.Flush(); err != nil {
			return 0, "", fileStamp{}, false, err
		}
		if _, err := tw.w.Write(ustarHeader(name, tar.TypeReg, int64(e.Mode.Perm()), size, mtime)); err != nil {
			return 0, "", fileStamp{}, false, err
		}
		body = tw.w
	} else {
		hdr := &tar.Header{
			Typeflag: tar.TypeReg,
			Name:     e.Path,
			Mode:     int64(e.Mode.Perm()),
			Size:     size,
			ModTime:  time.Unix(mtime, 0),
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return 0, "", fileStamp{}, false, err
		}
	}
	if opened != nil {
		opened(e.Path)
	}
	n, sum, err := copyContent(body, f, e.Path, size, buf)
	if raw && (err == nil || errors.Is(err, errShrank)) {
		_, werr := tw.w.Write(make([]byte, blockPad(n)))
		err = cmp.Or(werr, err)
	}
	switch {
	case errors.Is(err, errShrank):
		return n, "", fileStamp{}, false, fmt.Errorf("%q %w", e.Path, err)
	case err != nil:
		return n, "", fileStamp{}, false, err
	}
	return n, sum, fileStamp{mtime: f.info.mtime, ino: f.info.ino}, true, nil
}

// plainUstar reports whether a ustar header alone holds a file named name
// of size bytes modified at mtime (Unix seconds): a name of at most 100
// ASCII bytes, a size below 8 GiB, a time from 1970 to 2242 (11 octal
// digits each).
func plainUstar(name string, size, mtime int64) bool {
	if len(name) > 100 || size >= 1<<33 || mtime < 0 || mtime >= 1<<33 {
		return false
	}
	for i := range len(name) {
		if name[i] >= utf8.RuneSelf || name[i] == 0 {
			return false
		}
	}
	return true
}

// copyContent writes the size bytes of f, the file at name, to w and
// returns their SHA-256. A file that shrinks meanwhile is padded with
// zeros to size, to keep the archive whole, and fails with errShrank. buf
// is scratch space.
func copyContent(w io.Writer, f *regularFile, name string, size int64, buf []byte) (int64, string, error) {
	// Read at offsets: dataRegions may have moved the file's offset, on a
	// dense file that only looks sparse (ZFS with compression reports
	// fewer blocks than the file's data).
	h := sha256.New()
	var n int64
	for n < size {
		k, err := f.ReadAt(buf[:min(int64(len(buf)), size-n)], n)
		if k > 0 {
			h.Write(buf[:k])
			if _, err := w.Write(buf[:k]); err != nil {
				return n, "", err
			}
			n += int64(k)
		}
		if errors.Is(err, io.EOF) && n < size {
			clear(buf)
			for n < size {
				k, err := w.Write(buf[:min(int64(len(buf)), size-n)])
				if err != nil {
					return n, "", err
				}
				n += int64(k)
			}
			return n, "", errShrank
		}
		if err != nil && !errors.Is(err, io.EOF) {
			return n, "", fmt.Errorf("send %q: %w", name, err)
		}
	}
	return n, hex.EncodeToString(h.Sum(nil)), nil
}

// tail keeps the end of a remote command's stderr for error messages.
type tail struct{ b []byte }

const tailSize = 2048

func (t *tail) Write(p []byte) (int, error) {
	t.b = append(t.b, p...)
	if len(t.b) > tailSize {
		t.b = append(t.b[:0], t.b[len(t.b)-tailSize:]...)
	}
	return len(p), nil
}

// suffix formats the tail for appending to an error (see boxMessage).
func (t *tail) suffix() string {
	s := strings.TrimSpace(boxMessage(string(t.b)))
	if s == "" {
		return ""
	}
	return ": " + s
}

// checkLimits applies the Max limits to the file set before anything
// moves; the Warn limits apply to what is sent (session.warnLarge). It
// also refuses a file set holding Marker, the box's own file at the top
// of the remote directory.
func checkLimits(opts Options, files []File) error {
	if p, ok := holdsMarker(files); ok {
		return fmt.Errorf("%q is where crabbox marks the copy it synced on the box; rename it or leave it out of the sync (%s)", p, IgnoreFile)
	}
	limits := DefaultLimits()
	if opts.Limits != nil {
		limits = *opts.Limits
	}
	if opts.Force {
		limits.MaxFiles, limits.MaxBytes = 0, 0
	}
	limits.WarnFiles, limits.WarnBytes = 0, 0
	_, err := planOf(opts.Root, files).Check(limits)
	return err
}

// holdsMarker returns the path of the file set (sorted by path) that is
// Marker or inside it, if there is one.
func holdsMarker(files []File) (string, bool) {
	i, _ := slices.BinarySearchFunc(files, Marker, func(f File, p string) int { return strings.Compare(f.Path, p) })
	for ; i < len(files) && strings.HasPrefix(files[i].Path, Marker); i++ {
		if p := files[i].Path; p == Marker || p[len(Marker)] == '/' {
			return p, true
		}
	}
	return "", false
}

// exists reports whether name is there (anything that Lstat finds).
func exists(name string) bool {
	_, err := os.Lstat(name)
	return err == nil
}
