package sync

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
)

// Entry is one file of a manifest: what a file of the set was (locally) or
// is believed to be (on the box).
type Entry struct {
	Path string `json:"path"`
	// Mode is as in File: permission bits, or fs.ModeSymlink|0777.
	Mode fs.FileMode `json:"mode"`
	Size int64       `json:"size"`
	// MTime is the local modification time in nanoseconds since the Unix
	// epoch. It only serves the local hash cache: it is not part of the
	// fingerprint and never decides whether a file is sent.
	MTime int64 `json:"mtime"`
	// Link is a symlink's target; empty for a regular file.
	Link string `json:"link,omitempty"`
	// SHA256 is the hex SHA-256 of a regular file's content; empty for a
	// symlink.
	SHA256 string `json:"sha256,omitempty"`
}

// same reports whether two entries describe the same content on the box.
func (e Entry) same(o Entry) bool {
	return e.Path == o.Path && e.Mode == o.Mode && e.Size == o.Size && e.Link == o.Link && e.SHA256 == o.SHA256
}

// A manifest file is a header line and then the entries, sorted by path.
// The current format (3) is binary: per entry the path, mode, size, mtime
// and link target (strings as uvarint length and bytes, numbers as
// uvarints and varints) and the content hash (its 32 bytes, or none for a
// symlink, as a string). It is what the box stores and sends back, and
// at 20,000 files it is half the size of the earlier text format, which
// is still read, like the first version's JSON lines: version 2 has one
// line per entry, "MODE SIZE MTIME SHA256 PATH LINK", MODE in octal,
// SHA256 "-" for a symlink, PATH and LINK quoted as Go strings.
const (
	manifestHeader   = "crabbox-manifest 3"
	manifestHeaderV2 = "crabbox-manifest 2"
	manifestHeaderV1 = "crabbox-manifest 1"
)

// maxManifestSize bounds a manifest read back from the box (the fail
// guardrail of 150,000 files at a generous 1.5 KiB per entry fits).
const maxManifestSize = 256 << 20

// encodeManifest renders entries, which must be sorted by path.
func encodeManifest(entries []Entry) []byte {
	b := make([]byte, 0, len(manifestHeader)+1+len(entries)*80)
	b = append(b, manifestHeader...)
	b = append(b, '\n')
	var sum [sha256.Size]byte
	for _, e := range entries {
		b = appendString(b, e.Path)
		b = binary.AppendUvarint(b, uint64(e.Mode))
		b = binary.AppendVarint(b, e.Size)
		b = binary.AppendVarint(b, e.MTime)
		b = appendString(b, e.Link)
		if n, err := hex.Decode(sum[:], []byte(e.SHA256)); err == nil && n == sha256.Size {
			b = appendString(b, string(sum[:]))
		} else {
			b = appendString(b, "")
		}
	}
	return b
}

// parseEntries parses the entries of a version 3 manifest, checked but
// for their paths, modes and sizes (checkFields). Every hash is valid hex:
// it is made here, in one string for all of them.
func parseEntries(all string) ([]Entry, error) {
	d := &decoder{data: all}
	// A typical entry takes some 70 bytes; appending grows past a guess
	// that falls short.
	guess := len(all)/48 + 1
	entries := make([]Entry, 0, guess)
	sums := make([]byte, 0, guess*sha256.Size) // the raw hashes, one after the other
	hashed := make([]int, 0, guess)            // the entries they belong to
	for d.more() {
		e := Entry{Path: d.string()}
		mode := d.uvarint()
		e.Size, e.MTime, e.Link = d.varint(), d.varint(), d.string()
		sum := d.string()
		if d.bad || mode > math.MaxUint32 {
			return nil, fmt.Errorf("entry %d: malformed", len(entries)+1)
		}
		e.Mode = fs.FileMode(mode)
		switch len(sum) {
		case 0:
		case sha256.Size:
			hashed = append(hashed, len(entries))
			sums = append(sums, sum...)
		default:
			return nil, fmt.Errorf("entry %d: malformed content hash", len(entries)+1)
		}
		entries = append(entries, e)
	}
	hexes := newHexSums(sums)
	for k, i := range hashed {
		entries[i].SHA256 = hexes.at(k)
	}
	return entries, nil
}

// parseManifest parses and validates a manifest read from the box. It
// rejects anything a hostile box could use to make a push delete or write
// outside RemoteDir: unsafe paths, duplicates, unsorted entries,
// modes other than a regular file's or a symlink's, malformed hashes.
func parseManifest(data []byte) ([]Entry, error) {
	if len(data) > maxManifestSize {
		return nil, fmt.Errorf("manifest larger than %d bytes", maxManifestSize)
	}
	if len(data) == 0 {
		return nil, nil
	}
	// One copy of the data: paths and hashes are substrings of it.
	header, rest, ok := strings.Cut(string(data), "\n")
	parse := parseEntry
	switch string(header) {
	case manifestHeader:
		entries, err := parseEntries(rest)
		if err != nil {
			return nil, err
		}
		for i, e := range entries {
			if err := checkFields(e); err != nil {
				return nil, fmt.Errorf("entry %d: %w", i+1, err)
			}
			if i > 0 && entries[i-1].Path >= e.Path {
				return nil, fmt.Errorf("entry %d: path %q out of order or repeated", i+1, e.Path)
			}
		}
		return entries, nil
	case manifestHeaderV2:
	case manifestHeaderV1:
		parse = parseEntryV1
	default:
		ok = false
	}
	if !ok {
		return nil, errors.New("manifest does not start with " + strconv.Quote(manifestHeader))
	}
	entries := make([]Entry, 0, strings.Count(rest, "\n"))
	line := 1
	for len(rest) > 0 {
		line++
		var rec string
		rec, rest, ok = strings.Cut(rest, "\n")
		if !ok {
			return nil, fmt.Errorf("manifest line %d: not terminated by a newline", line)
		}
		e, err := parse(rec)
		if err != nil {
			return nil, fmt.Errorf("manifest line %d: %w", line, err)
		}
		if err := checkEntry(e); err != nil {
			return nil, fmt.Errorf("manifest line %d: %w", line, err)
		}
		if n := len(entries); n > 0 && entries[n-1].Path >= e.Path {
			return nil, fmt.Errorf("manifest line %d: path %q out of order or repeated", line, e.Path)
		}
		entries = append(entries, e)
	}
	return entries, nil
}

// The pending file of a push lists the paths it writes or deletes, quoted
// as Go strings, one per line after changesHeader, and ends with
// changesEnd: a list cut short is not a list.
const (
	changesHeader = "crabbox-changes 1"
	changesEnd    = "end"
)

func encodeChanges(paths []string) []byte {
	b := make([]byte, 0, len(changesHeader)+len(changesEnd)+2+len(paths)*64)
	b = append(b, changesHeader+"\n"...)
	for _, p := range paths {
		b = strconv.AppendQuote(b, p)
		b = append(b, '\n')
	}
	return append(b, changesEnd+"\n"...)
}

// parseChanges parses a pending file's list of changes, rejecting unsafe
// paths: they are deleted from the box when not in the file set.
func parseChanges(data []byte) ([]string, error) {
	if len(data) > maxManifestSize {
		return nil, fmt.Errorf("list of changes larger than %d bytes", maxManifestSize)
	}
	rest, ok := strings.CutPrefix(string(data), changesHeader+"\n")
	if !ok {
		return nil, errors.New("not a list of changes")
	}
	rest, ok = strings.CutSuffix(rest, changesEnd+"\n")
	if !ok {
		return nil, errors.New("list of changes cut short")
	}
	var paths []string
	for line := range strings.SplitSeq(rest, "\n") {
		if line == "" {
			continue
		}
		p, err := strconv.Unquote(line)
		if err != nil {
			return nil, fmt.Errorf("list of changes: %q: %w", line, err)
		}
		if err := checkPath(p); err != nil {
			return nil, fmt.Errorf("list of changes: unsafe path %q", p)
		}
		paths = append(paths, p)
	}
	return paths, nil
}

// parseEntry parses one line of a version 2 manifest.
func parseEntry(rec string) (Entry, error) {
	var e Entry
	var f [4]string
	for i := range f {
		var ok bool
		if f[i], rec, ok = strings.Cut(rec, " "); !ok {
			return e, errors.New("too few fields")
		}
	}
	mode, err1 := strconv.ParseUint(f[0], 8, 32)
	size, err2 := strconv.ParseInt(f[1], 10, 64)
	mtime, err3 := strconv.ParseInt(f[2], 10, 64)
	if err := errors.Join(err1, err2, err3); err != nil {
		return e, fmt.Errorf("malformed number: %w", err)
	}
	e.Mode, e.Size, e.MTime = fs.FileMode(mode), size, mtime
	if f[3] != "-" {
		e.SHA256 = f[3]
	}
	var err error
	if e.Path, rec, err = unquotePrefix(rec); err != nil {
		return e, fmt.Errorf("path: %w", err)
	}
	rec, ok := strings.CutPrefix(rec, " ")
	if !ok {
		return e, errors.New("no link field")
	}
	if e.Link, rec, err = unquotePrefix(rec); err != nil {
		return e, fmt.Errorf("link: %w", err)
	}
	if rec != "" {
		return e, errors.New("trailing data")
	}
	return e, nil
}

// appendQuoted appends s quoted as a Go string literal, as
// strconv.AppendQuote does; printable ASCII without quotes or backslashes,
// which most paths are, is copied as it is.
func appendQuoted(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < ' ' || c > '~' || c == '"' || c == '\\' {
			return strconv.AppendQuote(b, s)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}

// unquotePrefix unquotes the Go string literal at the start of s.
func unquotePrefix(s string) (string, string, error) {
	// Most literals hold no escapes and no quotes: their value is a
	// substring, found without copying. Only printable ASCII is taken
	// this way; anything else is left to strconv, which decides what
	// a literal may hold.
	if len(s) > 0 && s[0] == '"' {
		for i := 1; i < len(s); i++ {
			c := s[i]
			if c == '"' {
				return s[1:i], s[i+1:], nil
			}
			if c == '\\' || c < ' ' || c > '~' {
				break
			}
		}
	}
	q, err := strconv.QuotedPrefix(s)
	if err != nil {
		return "", "", err
	}
	v, err := strconv.Unquote(q)
	return v, s[len(q):], err
}

// parseEntryV1 parses one line of a version 1 manifest: a JSON object.
func parseEntryV1(rec string) (Entry, error) {
	var e Entry
	dec := json.NewDecoder(strings.NewReader(rec))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&e); err != nil {
		return e, err
	}
	if dec.More() {
		return e, errors.New("trailing data")
	}
	return e, nil
}

// isHash reports whether s is a SHA-256 in lowercase hex.
func isHash(s string) bool {
	if len(s) != sha256.Size*2 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

func checkEntry(e Entry) error {
	if e.Mode&^fs.ModePerm == 0 && !isHash(e.SHA256) {
		return fmt.Errorf("%q: malformed content hash", e.Path)
	}
	return checkFields(e)
}

// checkFields is checkEntry but for the content hash's hex, which
// parseEntries makes itself: only that a regular file has a hash.
func checkFields(e Entry) error {
	if err := checkPath(e.Path); err != nil {
		return fmt.Errorf("unsafe path %q: %w", e.Path, err)
	}
	switch {
	case e.Size < 0:
		return fmt.Errorf("%q: negative size", e.Path)
	case e.Mode&^fs.ModePerm == 0:
		if e.Link != "" {
			return fmt.Errorf("%q: regular file with a link target", e.Path)
		}
		if e.SHA256 == "" {
			return fmt.Errorf("%q: malformed content hash", e.Path)
		}
	case e.Mode&^fs.ModePerm == fs.ModeSymlink:
		if e.Link == "" || strings.IndexByte(e.Link, 0) >= 0 || e.Size != 0 || e.SHA256 != "" {
			return fmt.Errorf("%q: malformed symlink entry", e.Path)
		}
	default:
		return fmt.Errorf("%q: unsupported mode %v", e.Path, e.Mode)
	}
	return nil
}

// fingerprint is the SHA-256 over the sorted entries' paths, modes, sizes,
// link targets and content hashes (not their mtimes), each length-prefixed
// or a varint: equal fingerprints mean equal trees.
func fingerprint(entries []Entry) string {
	return digest(len(entries), func(b []byte, i int) []byte {
		e := &entries[i]
		b = appendString(b, e.Path)
		b = binary.AppendUvarint(b, uint64(e.Mode))
		b = binary.AppendVarint(b, e.Size)
		b = appendString(b, e.Link)
		return appendString(b, e.SHA256)
	})
}

// boxState is what the box holds, as far as a push trusts it: the
// entries of its manifest that no interrupted push may have changed, and
// every path crabbox synced there (which a push deletes when it is no
// longer in the file set), both sorted by path.
type boxState struct {
	trusted []Entry
	synced  []string
}

// newBoxState is the state of a box with the manifest prev (sorted by
// path) whose paths untrusted an interrupted push may have changed.
func newBoxState(prev []Entry, untrusted []string) *boxState {
	b := &boxState{trusted: prev, synced: make([]string, len(prev), len(prev)+len(untrusted))}
	for i, e := range prev {
		b.synced[i] = e.Path
	}
	if len(untrusted) > 0 {
		drop := make(map[string]bool, len(untrusted))
		for _, p := range untrusted {
			drop[p] = true
		}
		b.trusted = slices.DeleteFunc(slices.Clone(prev), func(e Entry) bool { return drop[e.Path] })
		b.synced = dedupSorted(append(b.synced, untrusted...))
	}
	return b
}

func byEntryPath(e Entry, p string) int { return strings.Compare(e.Path, p) }

// holdsDir reports whether the manifest entries (sorted by path) have a
// path in a directory.
func holdsDir(entries []Entry) func(dir string) bool {
	return func(dir string) bool {
		prefix := dir + "/"
		i, _ := slices.BinarySearchFunc(entries, prefix, byEntryPath)
		return i < len(entries) && strings.HasPrefix(entries[i].Path, prefix)
	}
}

// lookup returns the trusted entry of path p.
func (b *boxState) lookup(p string) (Entry, bool) {
	i, ok := slices.BinarySearchFunc(b.trusted, p, byEntryPath)
	if !ok {
		return Entry{}, false
	}
	return b.trusted[i], true
}

// wasSynced reports whether a push synced p before.
func (b *boxState) wasSynced(p string) bool {
	_, ok := slices.BinarySearch(b.synced, p)
	return ok
}

// diff decides what a push does: the indexes of the local entries (sorted
// by path) to send, those without an equal trusted entry, and the synced
// paths to delete, those no longer local, sorted. Both are one walk
// through sorted lists.
func (b *boxState) diff(local []Entry) (send []int, del []string) {
	j := 0
	for i, e := range local {
		for j < len(b.trusted) && b.trusted[j].Path < e.Path {
			j++
		}
		if j < len(b.trusted) && b.trusted[j].Path == e.Path && b.trusted[j].same(e) {
			continue
		}
		send = append(send, i)
	}
	k := 0
	for _, p := range b.synced {
		for k < len(local) && local[k].Path < p {
			k++
		}
		if k < len(local) && local[k].Path == p {
			continue
		}
		del = append(del, p)
	}
	return send, del
}

func dedupSorted(paths []string) []string {
	out := slices.Clone(paths)
	slices.Sort(out)
	return slices.Compact(out)
}

// cachedManifest describes files, with the content hashes the cache knows,
// and returns the indexes of the regular files whose hash it does not know.
func cachedManifest(files []File, cache *hashCache) (entries []Entry, misses []int) {
	entries = make([]Entry, len(files))
	for i, f := range files {
		e := &entries[i]
		*e = Entry{Path: f.Path, Mode: f.Mode, Size: f.Size, Link: f.LinkTarget}
		if f.LinkTarget != "" || cache.hit(e) {
			continue
		}
		misses = append(misses, i)
	}
	return entries, misses
}

// hashEntries reads and hashes the regular files entries[i] for i in idx,
// on several goroutines, and returns how many it read.
func hashEntries(ctx context.Context, root string, entries []Entry, idx []int, cache *hashCache) (hashed int, err error) {
	if len(idx) == 0 {
		return 0, ctx.Err()
	}
	dir, err := openRoot(root)
	if err != nil {
		return 0, err
	}
	defer dir.close()
	bufs := make([][]byte, scanWorkers())
	var read atomic.Int64
	err = forEach(ctx, len(idx), 1, func(w, k int) error {
		if bufs[w] == nil {
			bufs[w] = make([]byte, copyBuffer)
		}
		ok, err := describe(dir, &entries[idx[k]], cache, bufs[w])
		if ok {
			read.Add(1)
		}
		return err
	})
	return int(read.Load()), err
}

// copyBuffer is the size of the buffers files are read through.
const copyBuffer = 128 << 10

// describe fills in a regular file's size, mtime and hash, from the cache
// when it knows the file as it is. buf is scratch space.
func describe(root *rootDir, e *Entry, cache *hashCache, buf []byte) (read bool, err error) {
	info, err := root.lstat(e.Path)
	if err != nil {
		return false, fmt.Errorf("hash %q: %w", e.Path, err)
	}
	if info.mode.Type() != 0 {
		return false, fmt.Errorf("hash %q: %w", e.Path, errNotRegular)
	}
	e.Size, e.MTime = info.size, info.mtime
	if h, ok := cache.lookup(e.Path, e.Size, e.MTime, info.ino); ok {
		e.SHA256 = h
		return false, nil
	}
	f, err := root.openFile(e.Path)
	if err != nil {
		return false, fmt.Errorf("hash %q: %w", e.Path, err)
	}
	defer f.Close()
	if f.info.ino != info.ino {
		return false, fmt.Errorf("hash %q: replaced while syncing", e.Path)
	}
	h := sha256.New()
	n, err := io.CopyBuffer(hashWriter{h}, f, buf)
	if err != nil {
		return false, fmt.Errorf("hash %q: %w", e.Path, err)
	}
	e.Size = n
	e.SHA256 = hex.EncodeToString(h.Sum(nil))
	// A file still changing is hashed again next time.
	if n == info.size && f.info.mtime == info.mtime {
		cache.store(e.Path, e.Size, e.MTime, info.ino, e.SHA256)
	}
	return true, nil
}

// hashWriter hides everything but Write, so that io.CopyBuffer uses the
// buffer it is given.
type hashWriter struct{ io.Writer }
