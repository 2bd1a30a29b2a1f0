package sync

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// A box that holds the last push from this checkout does not send its
// manifest back; the push still sends, deletes and installs what it must.
// When the local copy cannot be read, or another checkout pushed since,
// the box's own manifest is used.
func TestPushUsesKnownManifest(t *testing.T) {
	client := dial(t)
	root := plainTree(t, 30, "v1")
	remoteDir := t.TempDir()
	cache := filepath.Join(t.TempDir(), "hashes")
	var known []bool
	opts := Options{Root: root, RemoteDir: remoteDir, CacheFile: cache, stateRead: func(k bool) { known = append(known, k) }}
	push(t, client, opts)

	write(t, root, "d1/f001.txt", "v2\n", 0o644)
	write(t, root, "new.txt", "new\n", 0o644)
	if err := os.Remove(filepath.Join(root, "d2/f002.txt")); err != nil {
		t.Fatal(err)
	}
	if st := push(t, client, opts); st.Sent != 2 || st.Deleted != 1 {
		t.Errorf("push: %+v, want 2 sent and 1 deleted", st)
	}
	sameTree(t, root, remoteDir)
	remoteManifest(t, remoteDir)

	// The local copy is damaged behind the fingerprint line.
	pushed := cache + pushedSuffix
	data, err := os.ReadFile(pushed)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(pushed, data[:len(data)-5], 0o600); err != nil {
		t.Fatal(err)
	}
	write(t, root, "d3/f003.txt", "v2\n", 0o644)
	if err := os.Remove(filepath.Join(root, "d4/f004.txt")); err != nil {
		t.Fatal(err)
	}
	if st := push(t, client, opts); st.Sent != 1 || st.Deleted != 1 {
		t.Errorf("push with a damaged local copy: %+v, want 1 sent and 1 deleted", st)
	}
	sameTree(t, root, remoteDir)

	// Another checkout pushes to the same box, then this one again.
	other := plainTree(t, 5, "other")
	push(t, client, Options{Root: other, RemoteDir: remoteDir, CacheFile: filepath.Join(t.TempDir(), "other")})
	write(t, root, "d5/f005.txt", "v2\n", 0o644)
	push(t, client, opts)
	sameTree(t, root, remoteDir)

	if diff := cmp.Diff([]bool{false, true, true, false}, known); diff != "" {
		t.Errorf("box left its manifest out as known (-want +got):\n%s", diff)
	}
}

func FuzzParsePushed(f *testing.F) {
	fp := fingerprint(sampleEntries)
	f.Add(formatPushed(fp, encodeManifest(sampleEntries)))
	f.Add([]byte(pushedHeader + fp + "\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		entries, err := parsePushed(data, fp)
		if err != nil {
			return
		}
		for i, e := range entries {
			if checkEntry(e) != nil || (i > 0 && entries[i-1].Path >= e.Path) {
				t.Fatalf("accepted %+v", e)
			}
		}
		again, err := parsePushed(formatPushed(fp, encodeManifest(entries)), fp)
		if err != nil || (len(entries) > 0 && !cmp.Equal(entries, again)) {
			t.Fatalf("round trip: %v\n%s", err, cmp.Diff(entries, again))
		}
	})
}
