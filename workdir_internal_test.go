package crabbox

import (
	"path/filepath"
	"regexp"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// A checkout's workdir name keeps its base name readable as one ordinary
// path element, and its hash tells checkouts of the same name apart.
func TestCheckoutKey(t *testing.T) {
	dir := t.TempDir()
	hash := regexp.MustCompile(`-[0-9a-f]{8}$`)
	for base, want := range map[string]string{
		"app":                     "app",
		"my app (copy)":           "my_app__copy_",
		".dotfiles":               "dotfiles",
		"..":                      "checkout", // Abs cleans it away: the parent's name
		"проект":                  "проект",
		"a\nb\x00c":               "a_b_c",
		"$(rm -rf ~)":             "__rm_-rf___",
		"x.y_z-1":                 "x.y_z-1",
		string(make([]byte, 100)): "________________________________________________",
	} {
		got := checkoutKey(filepath.Join(dir, "p", base))
		if base == ".." {
			got = checkoutKey(filepath.Join(dir, "p", "q", ".."))
			want = "p"
		}
		if !hash.MatchString(got) {
			t.Errorf("checkoutKey(%q) = %q, want a name and 8 hex digits", base, got)
			continue
		}
		if diff := cmp.Diff(want, hash.ReplaceAllString(got, "")); diff != "" {
			t.Errorf("checkoutKey(%q) name (-want +got):\n%s", base, diff)
		}
	}
	if a, b := checkoutKey(filepath.Join(dir, "one", "app")), checkoutKey(filepath.Join(dir, "two", "app")); a == b {
		t.Errorf("two checkouts named app share the key %s", a)
	}
	if got := safeName("..."); got != "checkout" {
		t.Errorf(`safeName("...") = %q, want "checkout"`, got)
	}
}
