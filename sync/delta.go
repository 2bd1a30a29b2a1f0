package sync

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"unsafe"

	"github.com/crabbox-dev/crabbox/internal/atomicfile"
)

// ChangeJournal is a ChangeClock that can also name what changed: the
// Client of package sync/watch is one. With it, a checkout in which a few
// files changed is not listed again: the listing saved with the last
// token is brought up to date for the named files alone.
type ChangeJournal interface {
	ChangeClock
	// Changes returns the current token and the paths (relative to the
	// checkout, slash-separated) of the regular files and symlinks that
	// may have changed since the token since. All is true when it cannot
	// name them; an error means no token is known.
	Changes(ctx context.Context, since string) (token string, paths []string, all bool, err error)
}

// maxDeltaPaths bounds the changed paths a listing is brought up to date
// for; past it the checkout is listed again.
const maxDeltaPaths = 1000

// snapshotSuffix names the file, next to Options.CacheFile, that keeps the
// listing made after the clock file's token: each file with its stamp
// and, where it was known, its content's hash. A hash learnt after the
// token holds as long as the journal does not name the file: unlike the
// hash cache, the snapshot needs no stamp to trust it.
const (
	snapshotSuffix = ".snapshot"
	snapshotHeader = "crabbox-snapshot 2"
)

// writeSnapshot saves the listing made after token; entries, nil or the
// manifest of files in their order, give the hashes.
func writeSnapshot(cacheFile, token string, files []File, stamps []fileStamp, entries []Entry) error {
	head := fmt.Sprintf("%s %s %d\n", snapshotHeader, token, len(files))
	b := make([]byte, 0, len(head)+len(files)*128)
	b = append(b, head...)
	for i, f := range files {
		b = appendString(b, f.Path)
		b = binary.AppendUvarint(b, uint64(f.Mode))
		b = binary.AppendVarint(b, f.Size)
		b = appendString(b, f.LinkTarget)
		b = binary.AppendVarint(b, stamps[i].mtime)
		b = binary.AppendUvarint(b, stamps[i].ino)
		sum := ""
		if len(entries) == len(files) && entries[i].Path == f.Path && len(entries[i].SHA256) == 64 {
			sum = entries[i].SHA256
		}
		b = appendString(b, sum)
	}
	return atomicfile.WriteCache(cacheFile+snapshotSuffix, b)
}

// readSnapshot reads the listing saved with token and its files' hashes
// ("" where unknown); ok is false when there is none, it was saved with
// another token, or it is malformed.
func readSnapshot(cacheFile, token string) (files []File, stamps []fileStamp, sums []string, ok bool) {
	data, err := os.ReadFile(cacheFile + snapshotSuffix)
	if err != nil {
		return nil, nil, nil, false
	}
	if len(data) == 0 {
		return nil, nil, nil, false
	}
	// The records' paths and hashes are substrings of the file's one
	// copy in memory, never changed after: copying it into a string
	// would cost a second allocation of its size.
	head, rest, found := strings.Cut(unsafe.String(&data[0], len(data)), "\n")
	f := strings.Fields(head)
	if !found || len(f) != 4 || f[0]+" "+f[1] != snapshotHeader || f[2] != token {
		return nil, nil, nil, false
	}
	n, err := strconv.Atoi(f[3])
	if err != nil || n < 0 || n > len(rest) {
		return nil, nil, nil, false
	}
	files, stamps, sums = make([]File, 0, n), make([]fileStamp, 0, n), make([]string, 0, n)
	d := &decoder{data: rest}
	for d.more() {
		var file File
		file.Path = d.string()
		file.Mode = fs.FileMode(d.uvarint())
		file.Size = d.varint()
		file.LinkTarget = d.string()
		st := fileStamp{mtime: d.varint(), ino: d.uvarint()}
		sum := d.string()
		if d.bad || (sum != "" && (len(sum) != 64 || file.LinkTarget != "")) {
			return nil, nil, nil, false
		}
		files = append(files, file)
		stamps = append(stamps, st)
		sums = append(sums, sum)
	}
	if len(files) != n || !slices.IsSortedFunc(files, func(a, b File) int { return strings.Compare(a.Path, b.Path) }) {
		return nil, nil, nil, false
	}
	return files, stamps, sums, true
}

// errListAgain says the listing cannot be brought up to date: the
// checkout is listed.
var errListAgain = errors.New("list again")

// listDelta brings the listing saved with the token p.since up to date
// for the paths p.changed, as a listing of the checkout would find it. It
// returns errListAgain when it cannot: no saved listing, too many paths, a
// changed file that decides what is listed (an ignore file).
func (p *Prepared) listDelta(ctx context.Context) error {
	opts, since, changed := p.opts, p.since, p.changed
	if len(changed) > maxDeltaPaths {
		return errListAgain
	}
	for _, c := range changed {
		if checkPath(c) != nil {
			return errListAgain // not a path in the checkout: trust none
		}
		switch path.Base(c) {
		case ".gitignore", ".crabboxignore", ".gitmodules":
			return errListAgain
		}
	}
	if runtime.GOOS == "windows" {
		return errListAgain // a listing there takes modes from git's index
	}
	files, stamps, sums, ok := readSnapshot(opts.CacheFile, since)
	if !ok {
		return errListAgain
	}
	// The manifest the box holds when it holds the last listing's
	// fingerprint, made before files changes below.
	prev := snapshotManifest(files, sums)
	m, err := newMatcher(opts.Root, opts.Exclude)
	if err != nil {
		return err
	}
	root, err := openRoot(opts.Root)
	if err != nil {
		return err
	}
	defer root.close()

	byPath := func(f File, p string) int { return strings.Compare(f.Path, p) }
	// What was listed is listed again as it is now, in place (its place
	// in the file set cannot have changed: the ignore rules and git's
	// index did not); what was not is asked of git, which knows whether
	// it is tracked or ignored.
	var unknown []string
	gone := map[int]bool{}
	for _, c := range changed {
		if err := ctx.Err(); err != nil {
			return err
		}
		i, found := slices.BinarySearchFunc(files, c, byPath)
		if !found {
			unknown = append(unknown, c)
			continue
		}
		f, st, ok, err := stat(root, listed{path: c}, false)
		if err != nil {
			return fmt.Errorf("list files of %s: %w", opts.Root, err)
		}
		if !ok {
			gone[i] = true
			continue
		}
		if f.LinkTarget != "" {
			st = fileStamp{} // as a listing has it: no stamp for a symlink
		}
		files[i], stamps[i] = f, st
	}
	var added []statted
	if len(unknown) > 0 {
		args := []string{"-c", "-o", "--exclude-standard", "--"}
		for _, u := range unknown {
			args = append(args, ":(literal)"+u)
		}
		entries, isRepo, err := gitList(ctx, opts.Root, args...)
		if err != nil {
			return fmt.Errorf("list files of %s: %w", opts.Root, err)
		}
		if !isRepo {
			return errListAgain
		}
		for _, e := range entries {
			if strings.HasSuffix(e.path, "/") {
				continue // a nested repository
			}
			if _, found := slices.BinarySearchFunc(files, e.path, byPath); found {
				continue
			}
			if err := checkPath(e.path); err != nil {
				return fmt.Errorf("list files of %s: %q: %w", opts.Root, e.path, err)
			}
			if m.excluded(e.path, false, e.tracked) {
				continue
			}
			f, st, ok, err := stat(root, e, false)
			if err != nil {
				return fmt.Errorf("list files of %s: %w", opts.Root, err)
			}
			if f.LinkTarget != "" {
				st = fileStamp{}
			}
			if ok {
				added = append(added, statted{f, st, ok})
			}
		}
	}
	snapFiles := files
	if len(gone) > 0 || len(added) > 0 {
		files, stamps = spliced(files, stamps, gone, added)
	}
	links := map[string]string{}
	for _, f := range files {
		if f.LinkTarget != "" {
			links[f.Path] = f.LinkTarget
		}
	}
	if outside := outsideLinks(links); len(outside) > 0 {
		if opts.RefuseOutsideLinks {
			return fmt.Errorf("list files of %s: symlink %q points to %q, outside the directory being synced", opts.Root, outside[0], links[outside[0]])
		}
		linked := make([]File, len(outside))
		for i, p := range outside {
			linked[i] = File{Path: p, Mode: fs.ModeSymlink | 0o777, LinkTarget: links[p]}
		}
		warning := outsideWarning(linked)
		p.clock.warning = warning
		if opts.Warn != nil {
			opts.Warn(warning)
		}
	}
	if err := checkLimits(opts, files); err != nil {
		return err
	}
	p.files, p.listed, p.total, p.unlisted = files, stamps, len(files), false
	p.delta = true
	if prev != nil && p.sinceFP != "" {
		p.prev, p.prevFP = prev, p.sinceFP
	}
	p.knownHashes(snapFiles, sums, changed)
	return nil
}

// spliced is files and their stamps, sorted, without the indexes gone
// and with added.
func spliced(files []File, stamps []fileStamp, gone map[int]bool, added []statted) ([]File, []fileStamp) {
	slices.SortFunc(added, func(a, b statted) int { return strings.Compare(a.file.Path, b.file.Path) })
	n := len(files) - len(gone) + len(added)
	outFiles, outStamps := make([]File, 0, n), make([]fileStamp, 0, n)
	for i, f := range files {
		for len(added) > 0 && added[0].file.Path < f.Path {
			outFiles, outStamps = append(outFiles, added[0].file), append(outStamps, added[0].stamp)
			added = added[1:]
		}
		if !gone[i] {
			outFiles, outStamps = append(outFiles, f), append(outStamps, stamps[i])
		}
	}
	for _, a := range added {
		outFiles, outStamps = append(outFiles, a.file), append(outStamps, a.stamp)
	}
	return outFiles, outStamps
}

// snapshotManifest is the manifest of a snapshot, or nil when it does not
// know every regular file's hash.
func snapshotManifest(files []File, sums []string) []Entry {
	entries := make([]Entry, len(files))
	for i, f := range files {
		if f.LinkTarget == "" && sums[i] == "" {
			return nil
		}
		entries[i] = Entry{Path: f.Path, Mode: f.Mode, Size: f.Size, Link: f.LinkTarget, SHA256: sums[i]}
	}
	return entries
}

// knownHashes makes the manifest of the file set from the hashes the
// snapshot (snapFiles, sums) knows of the files not changed since; the
// others are misses, hashed and then added to the hash cache without
// reading it. With no hash known, the hash cache is read as usual.
func (p *Prepared) knownHashes(snapFiles []File, sums []string, changed []string) {
	if !slices.ContainsFunc(sums, func(s string) bool { return s != "" }) {
		return
	}
	isChanged := make(map[string]bool, len(changed))
	for _, c := range changed {
		isChanged[c] = true
	}
	p.local = make([]Entry, len(p.files))
	p.stamps = map[string]fileStamp{}
	j := 0
	for i, f := range p.files {
		e := &p.local[i]
		*e = Entry{Path: f.Path, Mode: f.Mode, Size: f.Size, Link: f.LinkTarget, MTime: p.listed[i].mtime}
		if f.LinkTarget != "" {
			continue
		}
		for j < len(snapFiles) && snapFiles[j].Path < f.Path {
			j++
		}
		if !isChanged[f.Path] && j < len(snapFiles) && snapFiles[j].Path == f.Path && sums[j] != "" {
			e.SHA256 = sums[j]
			continue
		}
		p.misses = append(p.misses, i)
		p.stamps[f.Path] = p.listed[i]
	}
	p.cache = appendingCache(p.opts.CacheFile)
	p.cache.stamps = p.stamps
}
