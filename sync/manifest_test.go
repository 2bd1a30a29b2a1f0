package sync

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

var sampleEntries = []Entry{
	{Path: "a b/c'd", Mode: 0o755, Size: 3, MTime: 1700000000123456789, SHA256: strings.Repeat("0a", 32)},
	{Path: "link", Mode: fs.ModeSymlink | 0o777, MTime: 5, Link: "a b/c'd"},
	{Path: "new\nline", Mode: 0o644, SHA256: strings.Repeat("e3", 32)},
}

func TestManifestRoundTrip(t *testing.T) {
	data := encodeManifest(sampleEntries)
	got, err := parseManifest(data)
	if err != nil {
		t.Fatalf("parseManifest: %v\n%s", err, data)
	}
	if diff := cmp.Diff(sampleEntries, got); diff != "" {
		t.Errorf("round trip (-want +got):\n%s", diff)
	}
	if got, err := parseManifest(nil); err != nil || got != nil {
		t.Errorf("parseManifest(empty) = %v, %v", got, err)
	}
}

// A box synced by an earlier crabbox keeps a version 1 manifest (JSON
// lines); it is still read.
func TestParseManifestV1(t *testing.T) {
	var b bytes.Buffer
	b.WriteString(manifestHeaderV1 + "\n")
	for _, e := range sampleEntries {
		data, err := json.Marshal(e)
		if err != nil {
			t.Fatal(err)
		}
		b.Write(append(data, '\n'))
	}
	got, err := parseManifest(b.Bytes())
	if err != nil {
		t.Fatalf("parseManifest: %v\n%s", err, b.Bytes())
	}
	if diff := cmp.Diff(sampleEntries, got); diff != "" {
		t.Errorf("version 1 (-want +got):\n%s", diff)
	}
}

// A box synced by crabbox before the binary format keeps a version 2
// manifest (text lines); it is still read.
func TestParseManifestV2(t *testing.T) {
	var b strings.Builder
	b.WriteString(manifestHeaderV2 + "\n")
	for _, e := range sampleEntries {
		sum := e.SHA256
		if sum == "" {
			sum = "-"
		}
		fmt.Fprintf(&b, "%o %d %d %s %s %s\n", uint32(e.Mode), e.Size, e.MTime, sum, strconv.Quote(e.Path), strconv.Quote(e.Link))
	}
	got, err := parseManifest([]byte(b.String()))
	if err != nil {
		t.Fatalf("parseManifest: %v\n%s", err, b.String())
	}
	if diff := cmp.Diff(sampleEntries, got); diff != "" {
		t.Errorf("version 2 (-want +got):\n%s", diff)
	}
}

func TestParseManifestRejects(t *testing.T) {
	hash := strings.Repeat("a", 64)
	line := func(e string) string { return manifestHeaderV1 + "\n" + e + "\n" }
	tests := map[string]string{
		"no header":      `{"path":"a","mode":420,"size":0,"mtime":0,"sha256":"` + hash + `"}` + "\n",
		"dot dot":        line(`{"path":"../x","mode":420,"size":0,"mtime":0,"sha256":"` + hash + `"}`),
		"inner dot dot":  line(`{"path":"a/../../x","mode":420,"size":0,"mtime":0,"sha256":"` + hash + `"}`),
		"absolute":       line(`{"path":"/etc/passwd","mode":420,"size":0,"mtime":0,"sha256":"` + hash + `"}`),
		"nul":            line(`{"path":"a\u0000b","mode":420,"size":0,"mtime":0,"sha256":"` + hash + `"}`),
		"not clean":      line(`{"path":"a//b","mode":420,"size":0,"mtime":0,"sha256":"` + hash + `"}`),
		"directory mode": line(`{"path":"a","mode":2147484141,"size":0,"mtime":0,"sha256":"` + hash + `"}`),
		"bad hash":       line(`{"path":"a","mode":420,"size":0,"mtime":0,"sha256":"zz"}`),
		"upper hash":     line(`{"path":"a","mode":420,"size":0,"mtime":0,"sha256":"` + strings.ToUpper(hash) + `"}`),
		"negative size":  line(`{"path":"a","mode":420,"size":-1,"mtime":0,"sha256":"` + hash + `"}`),
		"empty link":     line(`{"path":"a","mode":134218239,"size":0,"mtime":0}`),
		"unknown field":  line(`{"path":"a","mode":420,"size":0,"mtime":0,"sha256":"` + hash + `","x":1}`),
		"trailing data":  line(`{"path":"a","mode":420,"size":0,"mtime":0,"sha256":"` + hash + `"} {}`),
		"unterminated":   manifestHeaderV1 + "\n" + `{"path":"a","mode":420,"size":0,"mtime":0,"sha256":"` + hash + `"}`,
		"unsorted": manifestHeaderV1 + "\n" + `{"path":"b","mode":420,"size":0,"mtime":0,"sha256":"` + hash + `"}` + "\n" +
			`{"path":"a","mode":420,"size":0,"mtime":0,"sha256":"` + hash + `"}` + "\n",
		"duplicate": manifestHeaderV1 + "\n" + `{"path":"a","mode":420,"size":0,"mtime":0,"sha256":"` + hash + `"}` + "\n" +
			`{"path":"a","mode":420,"size":0,"mtime":0,"sha256":"` + hash + `"}` + "\n",
	}
	// The same in the current format.
	line2 := func(e string) string { return manifestHeaderV2 + "\n" + e + "\n" }
	for name, data := range map[string]string{
		"v2 dot dot":        line2(`420 0 0 ` + hash + ` "../x" ""`),
		"v2 absolute":       line2(`420 0 0 ` + hash + ` "/etc/passwd" ""`),
		"v2 nul":            line2(`420 0 0 ` + hash + ` "a\x00b" ""`),
		"v2 directory mode": line2(`20000000755 0 0 ` + hash + ` "a" ""`),
		"v2 bad hash":       line2(`420 0 0 zz "a" ""`),
		"v2 negative size":  line2(`420 -1 0 ` + hash + ` "a" ""`),
		"v2 symlink hash":   line2(`1000000777 0 0 ` + hash + ` "a" "b"`),
		"v2 empty link":     line2(`1000000777 0 0 - "a" ""`),
		"v2 file with link": line2(`644 0 0 ` + hash + ` "a" "b"`),
		"v2 unquoted path":  line2(`644 0 0 ` + hash + ` a ""`),
		"v2 no link":        line2(`644 0 0 ` + hash + ` "a"`),
		"v2 trailing":       line2(`644 0 0 ` + hash + ` "a" "" x`),
		"v2 few fields":     line2(`644 0 "a" ""`),
		"v2 bad mode":       line2(`9z 0 0 ` + hash + ` "a" ""`),
		"v2 unsorted":       line2(`644 0 0 ` + hash + ` "b" ""` + "\n" + `644 0 0 ` + hash + ` "a" ""`),
		"v2 unterminated":   manifestHeaderV2 + "\n" + `644 0 0 ` + hash + ` "a" ""`,
	} {
		tests[name] = data
	}
	// And in the binary format.
	ok := Entry{Path: "a", Mode: 0o644, Size: 1, SHA256: hash}
	v3 := func(change func(*Entry)) string {
		e := ok
		change(&e)
		return string(encodeManifest([]Entry{e}))
	}
	for name, data := range map[string]string{
		"v3 dot dot":        v3(func(e *Entry) { e.Path = "../x" }),
		"v3 absolute":       v3(func(e *Entry) { e.Path = "/etc/passwd" }),
		"v3 directory mode": v3(func(e *Entry) { e.Mode = fs.ModeDir | 0o755 }),
		"v3 no hash":        v3(func(e *Entry) { e.SHA256 = "" }),
		"v3 symlink hash":   v3(func(e *Entry) { e.Mode, e.Link = fs.ModeSymlink|0o777, "b" }),
		"v3 negative size":  v3(func(e *Entry) { e.Size = -1 }),
		"v3 unsorted":       string(encodeManifest([]Entry{{Path: "b", Mode: 0o644, SHA256: hash}, ok})),
		"v3 duplicate":      string(encodeManifest([]Entry{ok, ok})),
		"v3 cut short":      v3(func(*Entry) {})[:len(manifestHeader)+10],
		"v3 short hash":     manifestHeader + "\n\x01a\x80\x08\x02\x00\x00\x03abc",
	} {
		tests[name] = data
	}
	for name, data := range tests {
		if _, err := parseManifest([]byte(data)); err == nil {
			t.Errorf("%s: parseManifest accepted %q", name, data)
		}
	}
	big := make([]byte, maxManifestSize+1)
	if _, err := parseManifest(big); err == nil || !strings.Contains(err.Error(), "larger") {
		t.Errorf("oversize manifest: %v", err)
	}
}

// FuzzParseManifest checks that whatever a box sends, an accepted manifest
// names only safe paths and survives a round trip.
func FuzzParseManifest(f *testing.F) {
	f.Add(encodeManifest(sampleEntries))
	f.Add([]byte(manifestHeaderV1 + "\n" + `{"path":"../x","mode":420,"size":0,"mtime":0,"sha256":""}` + "\n"))
	f.Add([]byte(manifestHeaderV1 + "\n{}\n"))
	f.Add([]byte(manifestHeaderV2 + "\n644 1 2 - \"a b\" \"\"\n"))
	f.Add([]byte("garbage"))
	f.Fuzz(func(t *testing.T, data []byte) {
		entries, err := parseManifest(data)
		if err != nil {
			return
		}
		for i, e := range entries {
			if checkPath(e.Path) != nil {
				t.Fatalf("accepted unsafe path %q", e.Path)
			}
			if i > 0 && entries[i-1].Path >= e.Path {
				t.Fatalf("accepted unsorted paths %q, %q", entries[i-1].Path, e.Path)
			}
		}
		again, err := parseManifest(encodeManifest(entries))
		if err != nil {
			t.Fatalf("re-encoded manifest rejected: %v", err)
		}
		if len(entries) > 0 && !cmp.Equal(entries, again) {
			t.Fatalf("round trip changed the manifest:\n%s", cmp.Diff(entries, again))
		}
	})
}

func TestFingerprint(t *testing.T) {
	fp := fingerprint(sampleEntries)
	if len(fp) != 64 || fp != fingerprint(sampleEntries) {
		t.Fatalf("fingerprint = %q", fp)
	}
	touched := append([]Entry(nil), sampleEntries...)
	touched[0].MTime++
	if fingerprint(touched) != fp {
		t.Error("fingerprint depends on mtimes")
	}
	for _, change := range []func(*Entry){
		func(e *Entry) { e.Mode = 0o644 },
		func(e *Entry) { e.SHA256 = strings.Repeat("0b", 32) },
		func(e *Entry) { e.Size++ },
		func(e *Entry) { e.Path = "other" },
	} {
		changed := append([]Entry(nil), sampleEntries...)
		change(&changed[0])
		if fingerprint(changed) == fp {
			t.Errorf("fingerprint ignores a change: %+v", changed[0])
		}
	}
	if fingerprint(sampleEntries[:2]) == fp {
		t.Error("fingerprint ignores a missing entry")
	}
}

func TestDiffManifests(t *testing.T) {
	h := func(c string) string { return strings.Repeat(c, 64) }
	local := []Entry{
		{Path: "changed", Mode: 0o644, Size: 1, SHA256: h("1")},
		{Path: "chmod", Mode: 0o755, Size: 1, SHA256: h("2")},
		{Path: "new", Mode: 0o644, Size: 1, SHA256: h("3")},
		{Path: "same", Mode: 0o644, Size: 1, MTime: 99, SHA256: h("4")},
		{Path: "relinked", Mode: fs.ModeSymlink | 0o777, Link: "b"},
	}
	prev := []Entry{
		{Path: "changed", Mode: 0o644, Size: 1, SHA256: h("9")},
		{Path: "chmod", Mode: 0o644, Size: 1, SHA256: h("2")},
		{Path: "relinked", Mode: fs.ModeSymlink | 0o777, Link: "a"},
		{Path: "same", Mode: 0o644, Size: 1, MTime: 1, SHA256: h("4")},
		{Path: "untrusted", Mode: 0o644, Size: 1, SHA256: h("5")},
	}
	// "gone" and "a/gone" were changed by an interrupted push, and so
	// was "untrusted", which is also local.
	local = append(local, Entry{Path: "untrusted", Mode: 0o644, Size: 1, SHA256: h("5")})
	slices.SortFunc(local, func(a, b Entry) int { return strings.Compare(a.Path, b.Path) })
	send, del := newBoxState(prev, []string{"gone", "untrusted", "gone", "a/gone"}).diff(local)
	var sent []string
	for _, i := range send {
		sent = append(sent, local[i].Path)
	}
	if diff := cmp.Diff([]string{"changed", "chmod", "new", "relinked", "untrusted"}, sent); diff != "" {
		t.Errorf("send (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"a/gone", "gone"}, del); diff != "" {
		t.Errorf("delete (-want +got):\n%s", diff)
	}
}

func TestParseHashes(t *testing.T) {
	h := strings.Repeat("ab", 32)
	out := []string{
		h + "  plain",
		h + " *binary mode",
		`\` + h + `  new\nline and back\\slash`,
		"sha256sum: missing: No such file or directory",
		"short",
	}
	want := map[string]string{"plain": h, "binary mode": h, "new\nline and back\\slash": h}
	if diff := cmp.Diff(want, parseHashes(out)); diff != "" {
		t.Errorf("parseHashes (-want +got):\n%s", diff)
	}
}

// A hostile box cannot make a push delete through its pending file or
// fingerprint either.
func TestPushIgnoresHostilePending(t *testing.T) {
	client := dial(t)
	root := plainTree(t, 3, "v1")
	base := t.TempDir()
	remoteDir := filepath.Join(base, "repo")
	write(t, base, "outside.txt", "precious", 0o644)
	bad := manifestHeaderV2 + "\n" + `{"path":"../outside.txt","mode":420,"size":0,"mtime":0,"sha256":"` + strings.Repeat("a", 64) + `"}` + "\n"
	write(t, StateDir(remoteDir), pendingFile, bad, 0o644)
	write(t, StateDir(remoteDir), fingerprintFile, "x\ncrabbox-sync same\n", 0o644)
	if _, err := Push(t.Context(), client, Options{Root: root, RemoteDir: remoteDir}); err != nil {
		t.Fatalf("Push: %v", err)
	}
	if _, err := os.Stat(filepath.Join(base, "outside.txt")); err != nil {
		t.Errorf("file outside the remote directory: %v", err)
	}
	sameTree(t, root, remoteDir)
}

// benchTree writes n files of a few KiB.
func benchTree(b *testing.B, n int) (string, []File) {
	b.Helper()
	root := b.TempDir()
	content := bytes.Repeat([]byte("crabbox "), 512)
	for i := range n {
		dir := filepath.Join(root, fmt.Sprintf("d%02d", i%50))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			b.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("f%05d", i)), append(content, byte(i)), 0o644); err != nil {
			b.Fatal(err)
		}
	}
	backdateB(b, root)
	b.Setenv("GIT_CEILING_DIRECTORIES", filepath.Dir(root))
	files, err := FileSet(b.Context(), root)
	if err != nil {
		b.Fatal(err)
	}
	return root, files
}

func backdateB(b *testing.B, root string) {
	b.Helper()
	err := filepath.Walk(root, func(name string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		return os.Chtimes(name, fi.ModTime().Add(-3600e9), fi.ModTime().Add(-3600e9))
	})
	if err != nil {
		b.Fatal(err)
	}
}

func BenchmarkManifest(b *testing.B) {
	root, files := benchTree(b, 5000)
	b.Run("nocache", func(b *testing.B) {
		for b.Loop() {
			if _, _, err := buildManifest(b.Context(), root, files, nil); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("cache", func(b *testing.B) {
		name := filepath.Join(b.TempDir(), "cache")
		c := loadCache(name)
		if _, _, err := buildManifest(b.Context(), root, files, c); err != nil {
			b.Fatal(err)
		}
		if err := c.save(); err != nil {
			b.Fatal(err)
		}
		for b.Loop() {
			c := loadCache(name)
			if _, _, err := buildManifest(b.Context(), root, files, c); err != nil {
				b.Fatal(err)
			}
			if err := c.save(); err != nil {
				b.Fatal(err)
			}
		}
	})
}

func BenchmarkDiff(b *testing.B) {
	const n = 50_000
	local := make([]Entry, n)
	prev := make([]Entry, 0, n+2)
	for i := range n {
		e := Entry{Path: fmt.Sprintf("dir%03d/file%06d.go", i%500, i), Mode: 0o644, Size: int64(i), SHA256: fmt.Sprintf("%064x", i)}
		local[i] = e
		if i%100 == 0 {
			e.SHA256 = fmt.Sprintf("%064x", i+1)
		}
		prev = append(prev, e)
	}
	prev = append(prev, Entry{Path: "gone/a"}, Entry{Path: "gone/b"})
	byPath := func(a, b Entry) int { return strings.Compare(a.Path, b.Path) }
	slices.SortFunc(local, byPath)
	slices.SortFunc(prev, byPath)
	box := newBoxState(prev, nil)
	b.ResetTimer()
	for b.Loop() {
		send, del := box.diff(local)
		if len(send) != n/100 || len(del) != 2 {
			b.Fatalf("diff: %d to send, %d to delete", len(send), len(del))
		}
		_ = fingerprint(local)
	}
}

// FuzzUnquotePrefix checks unquotePrefix's shortcut against strconv.
func FuzzUnquotePrefix(f *testing.F) {
	for _, s := range []string{`"a b" ""`, `"a\"b" x`, `"tab	x"`, `"é" ""`, `"unterminated`, `"\x00"`, `""`, `x"`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		v, rest, err := unquotePrefix(s)
		q, qerr := strconv.QuotedPrefix(s)
		var want string
		if qerr == nil {
			want, qerr = strconv.Unquote(q)
		}
		if (err == nil) != (qerr == nil) {
			t.Fatalf("unquotePrefix(%q) error %v, strconv %v", s, err, qerr)
		}
		if err == nil && (v != want || rest != s[len(q):]) {
			t.Fatalf("unquotePrefix(%q) = %q, %q; strconv: %q, %q", s, v, rest, want, s[len(q):])
		}
	})
}

// Oversized state on the box stops the push before anything changes, and
// names the file to remove.
func TestPushRefusesOversizedState(t *testing.T) {
	client := dial(t)
	root := plainTree(t, 3, "v1")
	remoteDir := t.TempDir()
	write(t, StateDir(remoteDir), manifestFile, manifestHeader+"\n"+strings.Repeat("x", 5000), 0o644)
	write(t, remoteDir, "kept.txt", "mine", 0o644)
	_, err := Push(t.Context(), client, Options{Root: root, RemoteDir: remoteDir, maxState: 4096})
	if err == nil || !strings.Contains(err.Error(), filepath.Join(StateDir(remoteDir), manifestFile)+" on the box is larger than 4096 bytes; remove it to start over") {
		t.Fatalf("Push = %v, want the oversized manifest named", err)
	}
	entries, err := os.ReadDir(remoteDir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if diff := cmp.Diff([]string{"kept.txt"}, names); diff != "" {
		t.Errorf("box changed (-want +got):\n%s", diff)
	}
}

// A fingerprint file on the box that holds no fingerprint (too long, not
// hex) is none: the push replaces it, and leaves what it did not sync.
func TestPushReplacesMalformedFingerprint(t *testing.T) {
	client := dial(t)
	root := plainTree(t, 3, "v1")
	for _, bad := range []string{strings.Repeat("f", 5000), strings.Repeat("g", 64), "", "two\nlines"} {
		remoteDir := t.TempDir()
		write(t, StateDir(remoteDir), fingerprintFile, bad, 0o644)
		write(t, remoteDir, "kept.txt", "mine", 0o644)
		stats, err := Push(t.Context(), client, Options{Root: root, RemoteDir: remoteDir})
		if err != nil || stats.Skipped {
			t.Fatalf("Push over fingerprint %.20q = %+v, %v; want a transfer", bad, stats, err)
		}
		again, err := Push(t.Context(), client, Options{Root: root, RemoteDir: remoteDir})
		if err != nil || !again.Skipped {
			t.Errorf("second Push over fingerprint %.20q = %+v, %v; want it skipped", bad, again, err)
		}
		if got, err := os.ReadFile(filepath.Join(remoteDir, "kept.txt")); err != nil || string(got) != "mine" {
			t.Errorf("kept.txt = %q, %v", got, err)
		}
	}
}

// FuzzAppendQuoted checks appendQuoted's shortcut against strconv.
func FuzzAppendQuoted(f *testing.F) {
	for _, s := range []string{"a/b.txt", `a"b`, `a\b`, "tab\t", "é", "\x7f", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if got, want := string(appendQuoted([]byte("x"), s)), "x"+strconv.Quote(s); got != want {
			t.Fatalf("appendQuoted(%q) = %s, want %s", s, got, want)
		}
	})
}

// buildManifest describes files with their content hashes, reading only
// the files the cache (if any) does not know with the same size, mtime and
// inode.
func buildManifest(ctx context.Context, root string, files []File, cache *hashCache) (entries []Entry, hashed int, err error) {
	entries, misses := cachedManifest(files, cache)
	hashed, err = hashEntries(ctx, root, entries, misses, cache)
	if err != nil {
		return nil, 0, err
	}
	return entries, hashed, nil
}

// benchEntries is a manifest of n regular files, sorted, like a checkout's.
func benchEntries(n int) []Entry {
	entries := make([]Entry, n)
	for i := range entries {
		sum := sha256.Sum256([]byte(strconv.Itoa(i)))
		entries[i] = Entry{Path: fmt.Sprintf("mod%02d/pkg%03d/file%06d.go", i%20, i%300, i), Mode: 0o644, Size: int64(1000 + i), MTime: int64(i) * 1e9, SHA256: hex.EncodeToString(sum[:])}
	}
	slices.SortFunc(entries, func(a, b Entry) int { return strings.Compare(a.Path, b.Path) })
	return entries
}

// BenchmarkParseManifest reads a 20,000-file manifest, as an incremental
// push reads the pushed file or the box's manifest.
func BenchmarkParseManifest(b *testing.B) {
	data := encodeManifest(benchEntries(20000))
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		if _, err := parseManifest(data); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkFingerprint(b *testing.B) {
	entries := benchEntries(20000)
	for b.Loop() {
		fingerprint(entries)
	}
}

// BenchmarkParseCache reads a 20,000-file hash cache, as every push whose
// listing is new does.
func BenchmarkParseCache(b *testing.B) {
	cache := map[string]cacheEntry{}
	for _, e := range benchEntries(20000) {
		cache[e.Path] = cacheEntry{Size: e.Size, MTime: e.MTime, Inode: uint64(e.Size), SHA256: e.SHA256}
	}
	data := formatCache(cache)
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		if _, _, err := parseCache(data); err != nil {
			b.Fatal(err)
		}
	}
}

func TestDiskFull(t *testing.T) {
	type result struct {
		Dir         string
		Free        int64
		Known, Full bool
		Rest        string
	}
	for _, tt := range []struct {
		stderr string
		want   result
	}{
		{"", result{}},
		{"tar: x: Cannot open: Permission denied\ncrabbox-sync free 10 /srv/repo\n",
			result{Rest: "tar: x: Cannot open: Permission denied\n"}},
		{"tar: a b: Cannot write: No space left on device\ntar: Exiting with failure status due to previous errors\ncrabbox-sync free 2048 /srv/my repo\n",
			result{Dir: "/srv/my repo", Free: 2 << 20, Known: true, Full: true,
				Rest: "tar: a b: Cannot write: No space left on device\ntar: Exiting with failure status due to previous errors\n"}},
		{"sh: cannot create .crabbox/pending: No space left on device\n",
			result{Full: true, Rest: "sh: cannot create .crabbox/pending: No space left on device\n"}},
		{"mv: No space left on device\ncrabbox-sync free x /d\n", // malformed: not known
			result{Full: true, Rest: "mv: No space left on device\n"}},
		// dash says only "I/O error" of a write that failed: full when
		// the directory has (nearly) nothing left.
		{"crabbox-sync: 47: echo: echo: I/O error\ncrabbox-sync free 12 /srv/.crabbox/repo\n",
			result{Dir: "/srv/.crabbox/repo", Free: 12 << 10, Known: true, Full: true, Rest: "crabbox-sync: 47: echo: echo: I/O error\n"}},
		{"crabbox-sync: 47: echo: echo: I/O error\ncrabbox-sync free 2048 /srv/.crabbox/repo\n",
			result{Rest: "crabbox-sync: 47: echo: echo: I/O error\n"}},
		{"crabbox-sync: 47: echo: echo: I/O error\n", result{Rest: "crabbox-sync: 47: echo: echo: I/O error\n"}},
	} {
		var got result
		got.Dir, got.Free, got.Known, got.Full = diskFull(tt.stderr)
		got.Rest = withoutFree(tt.stderr)
		if diff := cmp.Diff(tt.want, got); diff != "" {
			t.Errorf("diskFull(%q) (-want +got):\n%s", tt.stderr, diff)
		}
	}
}
