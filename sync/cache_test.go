package sync

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestCacheFormatRoundTrip(t *testing.T) {
	hash := "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	entries := map[string]cacheEntry{
		"a.txt":                 {Size: 1, MTime: 2, Inode: 3, SHA256: hash},
		"dir/with space/b c.go": {Size: 10, MTime: -5, Inode: 0, SHA256: hash},
		"odd\nname":             {Size: 0, MTime: 1, Inode: 1 << 40, SHA256: hash},
	}
	got, _, err := parseCache(formatCache(entries))
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(entries, got); diff != "" {
		t.Errorf("round trip (-want +got):\n%s", diff)
	}
	good := string(formatCache(map[string]cacheEntry{"a": {Size: 1, MTime: 2, Inode: 3, SHA256: hash}}))
	for _, bad := range []string{
		"", "{}", "crabbox hash cache 2\n1 2 3 " + hash + " a\x00", // an earlier format
		good[:len(good)-1],               // a hash cut short
		cacheHeader + "\x05ab",           // a path cut short
		cacheHeader + "\x01a\x02\x04",    // no inode or hash
		cacheHeader + "\xff\xff\xff\xff", // a runaway length
	} {
		if _, _, err := parseCache([]byte(bad)); err == nil {
			t.Errorf("parseCache(%q) accepted malformed content", bad)
		}
	}
}

func FuzzParseCache(f *testing.F) {
	f.Add(formatCache(map[string]cacheEntry{"a": {Size: 1, MTime: 2, Inode: 3, SHA256: "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"}}))
	f.Add([]byte(cacheHeader + "\x01a\x02\x04\x06"))
	f.Fuzz(func(t *testing.T, data []byte) {
		entries, _, err := parseCache(data)
		if err != nil {
			return
		}
		again, _, err := parseCache(formatCache(entries))
		if err != nil {
			t.Fatalf("reparse of formatted cache: %v", err)
		}
		if diff := cmp.Diff(entries, again); diff != "" {
			t.Errorf("format/parse not stable (-first +second):\n%s", diff)
		}
	})
}

func TestRacy(t *testing.T) {
	now := time.Date(2026, 11, 30, 8, 0, 0, 500_000_000, time.UTC)
	c := &hashCache{now: now.UnixNano()}
	tests := []struct {
		mtime time.Time
		want  bool
	}{
		{now.Add(-time.Hour), false},
		{now.Add(-time.Second), false},          // fine timestamps: past the window
		{now.Add(-50 * time.Millisecond), true}, // fine, within the window
		{now.Add(time.Minute), true},            // ahead of the clock
		{now.Truncate(time.Second), true},       // whole seconds, 0.5 s ago: coarse
		{now.Add(-3 * time.Second).Truncate(time.Second), false},
	}
	for _, tt := range tests {
		if got := c.racy(tt.mtime.UnixNano()); got != tt.want {
			t.Errorf("racy(%s) = %v, want %v", tt.mtime.Format(time.RFC3339Nano), got, tt.want)
		}
	}
}

// A save after a few files were hashed appends their records; the file is
// rewritten without stale records once those are as many as the files.
func TestCacheSaveAppendsThenCompacts(t *testing.T) {
	name := filepath.Join(t.TempDir(), "hashes")
	old := time.Now().Add(-time.Hour).UnixNano()
	sum := func(i int) string { return fmt.Sprintf("%064x", i) }
	stamps := map[string]fileStamp{}
	c := loadCache(name)
	c.stamps = stamps
	for i := range 100 {
		p := fmt.Sprintf("f%03d", i)
		stamps[p] = fileStamp{mtime: old, ino: uint64(i)}
		c.store(p, 1, old, uint64(i), sum(i))
	}
	if err := c.save(); err != nil {
		t.Fatal(err)
	}
	size := func() int64 {
		fi, err := os.Stat(name)
		if err != nil {
			t.Fatal(err)
		}
		return fi.Size()
	}
	full := size()

	// Round after round, one file changes.
	for round := 1; round <= 600; round++ {
		c := loadCache(name)
		c.stamps = stamps
		p := "f000"
		mtime := old + int64(round)
		stamps[p] = fileStamp{mtime: mtime, ino: 0}
		c.store(p, 1, mtime, 0, sum(1000+round))
		before := size()
		if err := c.save(); err != nil {
			t.Fatal(err)
		}
		got, _, err := parseCache(mustRead(t, name))
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != 100 || got[p].SHA256 != sum(1000+round) || got["f099"].SHA256 != sum(99) {
			t.Fatalf("round %d: %d entries, %s = %.8s", round, len(got), p, got[p].SHA256)
		}
		if after := size(); after < before {
			if after > full {
				t.Fatalf("round %d: compacted to %d bytes, want %d", round, after, full)
			}
			if round < 100 {
				t.Fatalf("round %d: compacted with few stale records", round)
			}
			return
		} else if after-before > 200 {
			t.Fatalf("round %d: the file grew by %d bytes for one record", round, after-before)
		}
	}
	t.Fatal("never compacted")
}

func mustRead(t *testing.T, name string) []byte {
	t.Helper()
	data, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	return data
}
