package sync

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"io/fs"
	"maps"
	"os"
	"strings"
	gosync "sync"
	"time"

	"github.com/crabbox-dev/crabbox/internal/atomicfile"
)

// hashCache remembers the content hashes of local files by path, size,
// mtime and inode, so that a push reads only the files that changed. A nil
// *hashCache caches nothing.
type hashCache struct {
	file string
	// now is when the cache was loaded: a file modified within the file
	// system's timestamp granularity of the moment it was hashed could
	// change again without its mtime changing, so it is not cached (see
	// racy).
	now int64

	// stamps are the files' sizes, mtimes and inodes as listed, so a
	// lookup needs no second lstat; set by Push, read-only afterwards.
	stamps map[string]fileStamp
	// rehash makes every lookup miss, so that every file is read again
	// (Options.Checksum: a file edited with its size, mtime and inode
	// kept looks unchanged); what is read is still stored. Set before
	// any lookup.
	rehash bool

	// appending is set for a cache that was not read (a sync that knew
	// the other hashes): what is stored is added at the file's end.
	appending bool

	mu      gosync.Mutex
	old     map[string]cacheEntry // as read
	records int                   // in the file as read: len(old) and superseded ones
	hits    int                   // lookups old answered
	stored  map[string]cacheEntry // hashed since
}

type cacheEntry struct {
	Size   int64
	MTime  int64
	Inode  uint64
	SHA256 string
}

// The cache file is a header line and then one record per file: the path
// (uvarint length, bytes), size and mtime (varints), inode (uvarint) and
// the 32 bytes of the SHA-256. It is read on every push that is not a
// no-op, so it is a format that parses in a few milliseconds for tens of
// thousands of files.
const (
	cacheHeader = "crabbox hash cache 3\n"
	// A file system whose timestamps have whole seconds (FAT has 2 s,
	// HFS+ 1 s) may not change a file's mtime for up to 2 s. Finer ones
	// (ext4, xfs, btrfs, tmpfs, APFS, NTFS) take timestamps from a clock
	// that ticks at least every 10 ms; racyFine leaves a wide margin.
	racyCoarse = 2 * time.Second
	racyFine   = 100 * time.Millisecond
)

// parseCache reads a cache file's records, a later record of a path
// replacing an earlier one, and counts them; malformed content is an
// error.
func parseCache(data []byte) (map[string]cacheEntry, int, error) {
	all, ok := strings.CutPrefix(string(data), cacheHeader)
	if !ok {
		return nil, 0, errors.New("not a hash cache")
	}
	type record struct {
		path string
		e    cacheEntry
	}
	// A record takes some 70 bytes; the hashes are made into hex in one
	// string for all of them.
	records := make([]record, 0, len(all)/48+1)
	sums := make([]byte, 0, cap(records)*sha256.Size)
	d := &decoder{data: all}
	for d.more() {
		path := d.string()
		size, mtime, ino := d.varint(), d.varint(), d.uvarint()
		if d.bad || len(all)-d.off < sha256.Size {
			return nil, 0, errors.New("malformed record")
		}
		sums = append(sums, all[d.off:d.off+sha256.Size]...)
		d.off += sha256.Size
		records = append(records, record{path, cacheEntry{Size: size, MTime: mtime, Inode: ino}})
	}
	hexes := newHexSums(sums)
	entries := make(map[string]cacheEntry, len(records))
	for i, r := range records {
		r.e.SHA256 = hexes.at(i)
		entries[r.path] = r.e
	}
	return entries, len(records), nil
}

func formatCache(entries map[string]cacheEntry) []byte {
	b := make([]byte, 0, len(cacheHeader)+len(entries)*96)
	return appendCacheRecords(append(b, cacheHeader...), entries)
}

func appendCacheRecords(b []byte, entries map[string]cacheEntry) []byte {
	for path, e := range entries {
		sum, err := hex.DecodeString(e.SHA256)
		if err != nil || len(sum) != sha256.Size {
			continue
		}
		b = appendString(b, path)
		b = binary.AppendVarint(b, e.Size)
		b = binary.AppendVarint(b, e.MTime)
		b = binary.AppendUvarint(b, e.Inode)
		b = append(b, sum...)
	}
	return b
}

// loadCache reads the cache file; a missing, unreadable or malformed file
// is an empty cache. An empty name disables caching.
func loadCache(name string) *hashCache {
	if name == "" {
		return nil
	}
	c := &hashCache{
		file:   name,
		now:    time.Now().UnixNano(),
		stored: map[string]cacheEntry{},
	}
	data, err := os.ReadFile(name)
	if err != nil {
		return c
	}
	if entries, records, err := parseCache(data); err == nil {
		c.old, c.records = entries, records
	}
	return c
}

func (c *hashCache) lookup(path string, size, mtime int64, inode uint64) (string, bool) {
	if c == nil || c.rehash {
		return "", false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.old[path]
	if !ok || e.Size != size || e.MTime != mtime || e.Inode != inode || len(e.SHA256) != 64 {
		return "", false
	}
	c.hits++
	return e.SHA256, true
}

// hit fills in e's mtime and hash from the cache when it knows the file as
// it was listed.
func (c *hashCache) hit(e *Entry) bool {
	if c == nil {
		return false
	}
	st, ok := c.stamps[e.Path]
	if !ok {
		return false
	}
	h, ok := c.lookup(e.Path, e.Size, st.mtime, st.ino)
	if ok {
		e.MTime, e.SHA256 = st.mtime, h
	}
	return ok
}

func (c *hashCache) store(path string, size, mtime int64, inode uint64, sum string) {
	if c == nil || c.racy(mtime) {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.stored[path] = cacheEntry{Size: size, MTime: mtime, Inode: inode, SHA256: sum}
}

// appendingCache is a cache of the file name that is not read: lookups
// miss, and save adds what was stored to the file.
func appendingCache(name string) *hashCache {
	return &hashCache{file: name, now: time.Now().UnixNano(), stored: map[string]cacheEntry{}, appending: true}
}

// save writes the entries of the files listed (stamps) that were looked up
// or stored since loadCache, unless that is exactly what was read.
func (c *hashCache) save() error {
	if c == nil {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.appending {
		if len(c.stored) == 0 {
			return nil
		}
		err := appendFile(c.file, appendCacheRecords(nil, c.stored))
		if errors.Is(err, fs.ErrNotExist) {
			err = atomicfile.WriteCache(c.file, formatCache(c.stored))
		}
		return err
	}
	// Records of files gone or changed are superseded or unused; they
	// cost only space, until they are as many as the files listed.
	live := len(c.old)
	if c.stamps != nil {
		live = len(c.stamps)
	}
	roomy := c.records+len(c.stored) <= 2*live+256
	switch {
	case len(c.stored) == 0 && (c.hits == len(c.old) || roomy):
		return nil
	case c.old != nil && roomy:
		// Only what was hashed since is written, at the end.
		return appendFile(c.file, appendCacheRecords(nil, c.stored))
	}
	keep := make(map[string]cacheEntry, len(c.old)+len(c.stored))
	if c.stamps == nil {
		// Nothing tells which files are gone: keep everything.
		maps.Copy(keep, c.old)
	}
	for path, st := range c.stamps {
		if e, ok := c.old[path]; ok && e.MTime == st.mtime && e.Inode == st.ino {
			keep[path] = e
		}
	}
	maps.Copy(keep, c.stored)
	return atomicfile.WriteCache(c.file, formatCache(keep))
}

// appendFile appends data to the file name, which must exist.
func appendFile(name string, data []byte) error {
	f, err := os.OpenFile(name, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	return errors.Join(err, f.Close())
}

// racy reports whether a file with this mtime was modified too recently
// for its mtime to tell a later change apart. An mtime of whole seconds
// may come from a file system with coarse timestamps.
func (c *hashCache) racy(mtime int64) bool {
	window := racyFine
	if mtime%int64(time.Second) == 0 {
		window = racyCoarse
	}
	return mtime > c.now-int64(window)
}

// racyIn reports whether a file of stamps is racy.
func (c *hashCache) racyIn(stamps map[string]fileStamp) bool {
	for _, st := range stamps {
		if c.racy(st.mtime) {
			return true
		}
	}
	return false
}

// The listing file (the cache file's name plus listingSuffix) remembers the
// fingerprint of the manifest of one listing: "header digest fingerprint".
// A checkout listed exactly as before (see listingDigest) has the same
// manifest, as far as the hash cache can tell, so its fingerprint is known
// without looking up a single hash.
const (
	listingSuffix = ".listing"
	listingHeader = "crabbox listing 2"
)

// listingDigest is the SHA-256 of everything the hash cache trusts about
// files: each file's path, mode, size, link target, mtime and inode.
func listingDigest(files []File, stamps []fileStamp) string {
	return digest(len(files), func(b []byte, i int) []byte {
		f := &files[i]
		b = appendString(b, f.Path)
		b = binary.LittleEndian.AppendUint32(b, uint32(f.Mode))
		b = binary.LittleEndian.AppendUint64(b, uint64(f.Size))
		b = binary.LittleEndian.AppendUint64(b, uint64(stamps[i].mtime))
		b = binary.LittleEndian.AppendUint64(b, stamps[i].ino)
		return appendString(b, f.LinkTarget)
	})
}

// readListing returns the fingerprint remembered for digest, or "".
func readListing(cacheFile, digest string) string {
	data, err := os.ReadFile(cacheFile + listingSuffix)
	if err != nil {
		return ""
	}
	f := strings.Fields(string(data))
	if len(f) != 5 || strings.Join(f[:3], " ") != listingHeader || f[3] != digest || len(f[4]) != 64 {
		return ""
	}
	return f[4]
}

// writeListing remembers fp as the fingerprint of digest's listing.
func writeListing(cacheFile, digest, fp string) error {
	if readListing(cacheFile, digest) == fp {
		return nil
	}
	return atomicfile.WriteCache(cacheFile+listingSuffix, []byte(listingHeader+" "+digest+" "+fp+"\n"))
}
