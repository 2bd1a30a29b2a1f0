package sync

import (
	"encoding/json"
	"os"
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

	mu      gosync.Mutex
	old     map[string]cacheEntry
	new     map[string]cacheEntry
	changed bool
}

type cacheEntry struct {
	Size   int64  `json:"size"`
	MTime  int64  `json:"mtime"`
	Inode  uint64 `json:"inode"`
	SHA256 string `json:"sha256"`
}

type cacheFile struct {
	Version int                   `json:"version"`
	Entries map[string]cacheEntry `json:"entries"`
}

const (
	cacheVersion = 1
	racyWindow   = 2 * time.Second
)

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
	var f cacheFile
	if json.Unmarshal(data, &f) == nil && f.Version == cacheVersion {
		c.old = f.Entries
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

func (c *hashCache) store(path string, size, mtime int64, inode uint64, sum string) {
	if c == nil || mtime > c.racy {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.new[path] = cacheEntry{Size: size, MTime: mtime, Inode: inode, SHA256: sum}
	c.changed = true
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
	data, err := json.Marshal(cacheFile{Version: cacheVersion, Entries: c.new})
	if err != nil {
		return err
	}
	return atomicfile.Write(c.file, data)
}
