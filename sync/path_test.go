package sync

import (
	"path"
	"strings"
	"testing"
)

func TestCheckPath(t *testing.T) {
	good := []string{"a", "a/b", ".x", "..x", "x..", "a/..b", "a b/c'd", "dir/.git/x", `back\slash`, "C:x"}
	bad := []string{"", ".", "..", "../a", "a/..", "a/../b", "/a", "a/", "a//b", "./a", "a/./b", "a\x00b", "//a"}
	for _, p := range good {
		if err := checkPath(p); err != nil {
			t.Errorf("checkPath(%q) = %v, want nil", p, err)
		}
	}
	for _, p := range bad {
		if err := checkPath(p); err == nil {
			t.Errorf("checkPath(%q) = nil, want an error", p)
		}
	}
}

// FuzzCheckPath checks that every accepted path stays inside the root it
// is joined to, however it is written.
func FuzzCheckPath(f *testing.F) {
	for _, s := range []string{"a", "a/b", "../a", "a/../..", "/etc/passwd", "a//b", ".", "..x/y", "a/\x00", `C:\x`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, p string) {
		if checkPath(p) != nil {
			return
		}
		if strings.IndexByte(p, 0) >= 0 || path.IsAbs(p) {
			t.Fatalf("accepted %q", p)
		}
		joined := path.Join("/root", p)
		if !strings.HasPrefix(joined, "/root/") {
			t.Fatalf("accepted %q, which joins to %q", p, joined)
		}
		if joined != "/root/"+p {
			t.Fatalf("accepted %q, which is not clean (joins to %q)", p, joined)
		}
	})
}

func TestCheckLinks(t *testing.T) {
	tests := []struct {
		name  string
		links map[string]string
		bad   string // the link reported, or "" for none
	}{
		{"sibling", map[string]string{"a": "b"}, ""},
		{"into subdir", map[string]string{"a": "d/e/f"}, ""},
		{"up within root", map[string]string{"d/a": "../b"}, ""},
		{"dot", map[string]string{"d/a": "."}, ""},
		{"absolute", map[string]string{"a": "/etc/passwd"}, "a"},
		{"windows absolute", map[string]string{"a": `C:\x`}, "a"},
		{"up and out", map[string]string{"a": "../x"}, "a"},
		{"deep up and out", map[string]string{"d/e/a": "../../../x"}, "d/e/a"},
		{"out and back in", map[string]string{"a": "../root/x"}, "a"},
		{"through a link to dot", map[string]string{"sub/b": ".", "sub/a": "b/../.."}, "sub/a"},
		{"through a link deeper", map[string]string{"l": "d/e", "a": "l/../.."}, ""},
		{"chain out", map[string]string{"a": "b/x", "b": "c", "c": ".."}, "a"},
		{"chain out, reported link", map[string]string{"x": "y/z", "y": ".."}, "x"},
		{"loop", map[string]string{"a": "b", "b": "a"}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := checkLinks(tt.links)
			if tt.bad == "" {
				if err != nil {
					t.Errorf("checkLinks = %v, want nil", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), `"`+tt.bad+`"`) {
				t.Errorf("checkLinks = %v, want an error naming %q", err, tt.bad)
			}
		})
	}
}

func TestEscapesOnlyThroughChain(t *testing.T) {
	// "a" alone looks harmless; only b's target makes it leave the root.
	links := map[string]string{"a": "b/x", "b": "c", "c": ".."}
	if !escapes(links, "a") {
		t.Error(`escapes("a") = false, want true: a -> b/x -> c/x -> ../x`)
	}
}
