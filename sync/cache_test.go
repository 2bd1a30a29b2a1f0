package sync

import (
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
	got, err := parseCache(formatCache(entries))
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
		if _, err := parseCache([]byte(bad)); err == nil {
			t.Errorf("parseCache(%q) accepted malformed content", bad)
		}
	}
}

func FuzzParseCache(f *testing.F) {
	f.Add(formatCache(map[string]cacheEntry{"a": {Size: 1, MTime: 2, Inode: 3, SHA256: "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"}}))
	f.Add([]byte(cacheHeader + "\x01a\x02\x04\x06"))
	f.Fuzz(func(t *testing.T, data []byte) {
		entries, err := parseCache(data)
		if err != nil {
			return
		}
		again, err := parseCache(formatCache(entries))
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
