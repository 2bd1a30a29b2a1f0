package sync

import (
	"os/exec"
	"path/filepath"
	"testing"
)

// BenchmarkPrepare measures the client's side of a no-op push of a
// 20,000-file git checkout: listing the file set and finding its
// fingerprint with a warm hash cache.
func BenchmarkPrepare(b *testing.B) {
	root, _ := benchTree(b, 20000)
	for _, args := range [][]string{{"init", "-q"}, {"add", "-A"}, {"-c", "user.name=b", "-c", "user.email=b@b", "commit", "-qm", "x"}} {
		cmd := exec.Command("git", args...)
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			b.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
	opts := Options{Root: root, RemoteDir: "w", CacheFile: filepath.Join(b.TempDir(), "cache")}
	// Hash everything and remember the listing, as a first push would.
	p, err := Prepare(b.Context(), opts)
	if err != nil {
		b.Fatal(err)
	}
	if err := p.hash(b.Context(), p.misses); err != nil {
		b.Fatal(err)
	}
	p.remember(fingerprint(p.local), p.local)
	for b.Loop() {
		p, err := Prepare(b.Context(), opts)
		if err != nil {
			b.Fatal(err)
		}
		if p.local != nil {
			b.Fatal("the manifest was built for a listing the cache knows")
		}
	}
}
