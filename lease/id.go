// Package lease is crabbox's lease identity and lifecycle: lease and run IDs,
// friendly slugs, the local lease store (claims), per-lease SSH keys and
// pinned host keys, expiry rules, and the acquire, resolve, touch, heartbeat
// and release steps that wrap a provider's SSH-lease backend.
//
// A claim is written to the store before a provider creates anything and
// updated after, so a crash at any step leaves what cleanup needs to find and
// delete the box.
package lease

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strings"

	"github.com/crabbox-dev/crabbox/internal/hexid"
)

// The checks below are plain loops, not regexps: every crabbox command
// links this package, and regexps compiled at start cost each one.

// NewID returns a new lease ID: "cbx_" and 12 lowercase hex digits.
func NewID() string { return "cbx_" + randomHex(6) }

// NewRunID returns a new run ID: "run_" and 12 lowercase hex digits.
func NewRunID() string { return "run_" + randomHex(6) }

// IsRunID reports whether s has the shape of a run ID (run_ and 12
// lowercase hex digits).
func IsRunID(s string) bool { return hexid.Valid(s, "run_", 12) }

// IsID reports whether s has the shape of a lease ID.
func IsID(s string) bool { return hexid.Valid(s, "cbx_", 12) }

// ValidSlug reports whether s is a well-formed slug: lowercase [a-z0-9-],
// at most 41 characters, words of letters and digits joined by single
// dashes.
func ValidSlug(s string) bool {
	if s == "" || len(s) > 41 || s[0] == '-' || s[len(s)-1] == '-' || strings.Contains(s, "--") {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
			return false
		}
	}
	return true
}

// NewSlug returns a friendly adjective-noun slug for which taken returns
// false, adding "-" and 4 hex digits on collision.
func NewSlug(taken func(string) bool) string {
	base := adjectives[randomIndex(len(adjectives))] + "-" + nouns[randomIndex(len(nouns))]
	slug := base
	for taken(slug) {
		slug = base + "-" + randomHex(2)
	}
	return slug
}

// checkRef validates an ID-or-slug reference from a user.
func checkRef(ref string) error {
	if IsID(ref) || ValidSlug(ref) {
		return nil
	}
	if strings.HasPrefix(ref, "cbx_") {
		return fmt.Errorf("lease ID %q is malformed: want cbx_ and 12 lowercase hex digits", ref)
	}
	return fmt.Errorf("lease reference %q is neither a lease ID (cbx_...) nor a slug (lowercase letters, digits, dashes)", ref)
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b) // crypto/rand.Read never returns an error
	return hex.EncodeToString(b)
}

func randomIndex(n int) int {
	var b [2]byte
	_, _ = rand.Read(b[:])
	return (int(b[0])<<8 | int(b[1])) % n
}

var adjectives = []string{
	"amber", "bold", "brave", "brisk", "calm", "clever", "coral", "crisp", "dapper", "deft",
	"eager", "fancy", "fleet", "gentle", "glad", "golden", "grand", "happy", "hardy", "jolly",
	"keen", "lively", "lucky", "mellow", "merry", "misty", "nimble", "noble", "plucky", "proud",
	"quick", "quiet", "rapid", "salty", "sandy", "shiny", "snappy", "spry", "steady", "sunny",
	"swift", "tidal", "tough", "vivid", "witty", "zesty",
}

var nouns = []string{
	"barnacle", "clam", "crab", "crayfish", "cuttle", "dolphin", "eel", "gull", "hermit", "kelp",
	"krill", "limpet", "lobster", "mackerel", "manta", "marlin", "mussel", "narwhal", "octopus", "orca",
	"otter", "oyster", "pelican", "prawn", "puffin", "reef", "scallop", "seal", "shrimp", "snapper",
	"sponge", "squid", "starfish", "sturgeon", "tuna", "turtle", "urchin", "walrus", "whelk", "wrasse",
}
