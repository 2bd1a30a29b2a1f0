package sync

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"strconv"
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
	// racy is the newest mtime whose files are cached: a file modified
	// within the file system's timestamp granularity of the moment it was
	// hashed could change again without its mtime changing.
	racy int64

	// stamps are the files' mtimes and inodes as listed, so a lookup needs
	// no second lstat; set by Push, read-only afterwards.
	stamps map[string]fileStamp

	mu      gosync.Mutex
	old     map[string]cacheEntry
	new     map[string]cacheEntry
	changed bool
}

type cacheEntry struct {
	Size   int64
	MTime  int64
	Inode  uint64
	SHA256 string
}

// The cache file is a header line and then one NUL-terminated record per
// file: "size mtime inode sha256 path". It is read on every sync, so it is
// a format that parses in a few milliseconds for tens of thousands of files.
const (
	cacheHeader = "crabbox hash cache 2\n"
	racyWindow  = 2 * time.Second
)

// parseCache reads a cache file's records; malformed content is an error.
func parseCache(data []byte) (map[string]cacheEntry, error) {
	rest, ok := bytes.CutPrefix(data, []byte(cacheHeader))
	if !ok {
		return nil, errors.New("not a hash cache")
	}
	entries := map[string]cacheEntry{}
	for len(rest) > 0 {
		rec, tail, ok := bytes.Cut(rest, []byte{0})
		if !ok {
			return nil, errors.New("truncated record")
		}
		rest = tail
		f := strings.SplitN(string(rec), " ", 5)
		if len(f) != 5 || len(f[3]) != 64 {
			return nil, errors.New("malformed record")
		}
		size, err1 := strconv.ParseInt(f[0], 10, 64)
		mtime, err2 := strconv.ParseInt(f[1], 10, 64)
		ino, err3 := strconv.ParseUint(f[2], 10, 64)
		if err := errors.Join(err1, err2, err3); err != nil {
			return nil, err
		}
		entries[f[4]] = cacheEntry{Size: size, MTime: mtime, Inode: ino, SHA256: f[3]}
	}
	return entries, nil
}

func formatCache(entries map[string]cacheEntry) []byte {
	b := make([]byte, 0, len(cacheHeader)+len(entries)*128)
	b = append(b, cacheHeader...)
	for path, e := range entries {
		b = strconv.AppendInt(b, e.Size, 10)
		b = append(b, ' ')
		b = strconv.AppendInt(b, e.MTime, 10)
		b = append(b, ' ')
		b = strconv.AppendUint(b, e.Inode, 10)
		b = append(b, ' ')
		b = append(b, e.SHA256...)
		b = append(b, ' ')
		b = append(b, path...)
		b = append(b, 0)
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
		file: name,
		racy: time.Now().Add(-racyWindow).UnixNano(),
		new:  map[string]cacheEntry{},
	}
	data, err := os.ReadFile(name)
	if err != nil {
		return c
	}
	if entries, err := parseCache(data); err == nil {
		c.old = entries
		c.new = make(map[string]cacheEntry, len(entries))
	}
	return c
}

func (c *hashCache) lookup(path string, size, mtime int64, inode uint64) (string, bool) {
	if c == nil {
		return "", false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.old[path]
	if !ok || e.Size != size || e.MTime != mtime || e.Inode != inode || len(e.SHA256) != 64 {
		return "", false
	}
	c.new[path] = e
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
	if c == nil || mtime > c.racy {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.new[path] = cacheEntry{Size: size, MTime: mtime, Inode: inode, SHA256: sum}
	c.changed = true
}

// racyIn reports whether a file of stamps was modified too recently for
// its mtime to tell a later change apart.
func (c *hashCache) racyIn(stamps map[string]fileStamp) bool {
	for _, st := range stamps {
		if st.mtime > c.racy {
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
	listingHeader = "crabbox listing 1"
)

// listingDigest is the SHA-256 of everything the hash cache trusts about
// files: each file's path, mode, size, link target, mtime and inode.
func listingDigest(files []File, stamps map[string]fileStamp) string {
	h := sha256.New()
	var buf []byte
	for _, f := range files {
		st := stamps[f.Path]
		buf = buf[:0]
		buf = append(buf, f.Path...)
		buf = append(buf, 0)
		buf = strconv.AppendUint(buf, uint64(f.Mode), 10)
		buf = append(buf, ' ')
		buf = strconv.AppendInt(buf, f.Size, 10)
		buf = append(buf, ' ')
		buf = strconv.AppendInt(buf, st.mtime, 10)
		buf = append(buf, ' ')
		buf = strconv.AppendUint(buf, st.ino, 10)
		buf = append(buf, ' ')
		buf = append(buf, f.LinkTarget...)
		buf = append(buf, 0)
		h.Write(buf)
	}
	return hex.EncodeToString(h.Sum(nil))
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
	return atomicfile.Write(cacheFile+listingSuffix, []byte(listingHeader+" "+digest+" "+fp+"\n"))
}

// save writes the entries looked up or stored since loadCache, if they
// differ from what was read.
func (c *hashCache) save() error {
	if c == nil {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.changed && len(c.new) == len(c.old) {
		return nil
	}
	return atomicfile.Write(c.file, formatCache(c.new))
}
