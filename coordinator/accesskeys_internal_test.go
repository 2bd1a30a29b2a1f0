package coordinator

import (
	"fmt"
	"testing"
)

// TestOwnerAccessKeyCache: the cached key is the derived one, the cache
// stays bounded, and without a secret there is no key to cache.
func TestOwnerAccessKeyCache(t *testing.T) {
	s := &Server{accessSecret: []byte("0123456789abcdef0123456789abcdef")}
	want := s.accessPublicKey("cbx_0123456789ab")
	if want == "" {
		t.Fatal("no access key derived")
	}
	for range 2 {
		if got := s.ownerAccessKey("cbx_0123456789ab"); got != want {
			t.Fatalf("ownerAccessKey = %q, want %q", got, want)
		}
	}
	// A full cache is emptied before the next key goes in.
	for i := range maxCachedAccessKeys {
		s.accessKeys.keys[fmt.Sprintf("cbx_%012x", i)] = "k"
	}
	s.ownerAccessKey("cbx_ffffffffffff")
	if n := len(s.accessKeys.keys); n != 1 {
		t.Errorf("%d keys cached after the cache was full, want 1", n)
	}
	if got := s.ownerAccessKey("cbx_0123456789ab"); got != want {
		t.Errorf("after the cache was emptied: %q, want %q", got, want)
	}
	none := &Server{}
	if got := none.ownerAccessKey("cbx_0123456789ab"); got != "" || len(none.accessKeys.keys) != 0 {
		t.Errorf("without a secret: %q, %d cached", got, len(none.accessKeys.keys))
	}
}
