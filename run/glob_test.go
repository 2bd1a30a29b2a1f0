package run

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestParseGlob(t *testing.T) {
	tests := []struct {
		glob      string
		wantStart string
		wantFind  string
		wantErr   string
	}{
		{glob: "*.xml", wantStart: ".", wantFind: "./*.xml"},
		{glob: "./reports//*.xml", wantStart: "reports", wantFind: "reports/*.xml"},
		{glob: "reports/**/*.xml", wantStart: "reports", wantFind: "reports/**.xml"},
		{glob: "**", wantStart: ".", wantFind: "./*"},
		{glob: "a/**/**/b", wantStart: "a", wantFind: "a/**b"},
		{glob: "out/report.txt", wantStart: "out/report.txt", wantFind: "out/report.txt"},
		{glob: "a/[bc]/d", wantStart: "a", wantFind: "a/*/d"},
		{glob: `we*rd/x`, wantStart: ".", wantFind: "./we*rd/x"},
		{glob: "../x", wantErr: `".." element`},
		{glob: "a/../../x", wantErr: `".." element`},
		{glob: "/etc/*", wantErr: "absolute"},
		{glob: `C:\x`, wantErr: "absolute"},
		{glob: "", wantErr: "empty"},
		{glob: ".", wantErr: "whole workdir"},
		{glob: "a**", wantErr: "whole path element"},
		{glob: "a/[", wantErr: "malformed"},
		{glob: "a\nb", wantErr: "line break"},
	}
	for _, tt := range tests {
		g, err := parseGlob(tt.glob)
		if tt.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) || !strings.Contains(err.Error(), "glob") {
				t.Errorf("parseGlob(%q) error %v, want one naming the glob and saying %q", tt.glob, err, tt.wantErr)
			}
			continue
		}
		if err != nil {
			t.Errorf("parseGlob(%q): %v", tt.glob, err)
			continue
		}
		if g.start != tt.wantStart || g.findPattern() != tt.wantFind {
			t.Errorf("parseGlob(%q): start %q, find pattern %q; want %q, %q", tt.glob, g.start, g.findPattern(), tt.wantStart, tt.wantFind)
		}
	}
}

func TestGlobMatch(t *testing.T) {
	tests := []struct {
		glob string
		yes  []string
		no   []string
	}{
		{"*.xml", []string{"a.xml", ".hidden.xml"}, []string{"d/a.xml", "a.xmlx"}},
		{"reports/**/*.xml", []string{"reports/a.xml", "reports/x/y/a.xml"}, []string{"a.xml", "reports/a.txt", "other/reports/a.xml"}},
		{"**/*.xml", []string{"a.xml", "x/y/a.xml"}, []string{"a.txt"}},
		{"**", []string{"a", "x/y/z"}, nil},
		{"coverage", []string{"coverage", "coverage/index.html", "coverage/x/y"}, []string{"coverage2/x", "x/coverage"}},
		{"build/*", []string{"build/a", "build/sub/b"}, []string{"build2/a"}},
		{"a/*/c", []string{"a/b/c", "a/b/c/d"}, []string{"a/c", "a/b/x/c"}},
		{"a/**/c", []string{"a/c", "a/b/c", "a/b/x/c"}, []string{"a/bc", "b/c"}},
		{"a?.log", []string{"ab.log"}, []string{"a/.log", "abc.log"}},
	}
	for _, tt := range tests {
		g, err := parseGlob(tt.glob)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range tt.yes {
			if !g.match(p) {
				t.Errorf("%q does not match %q, want a match", tt.glob, p)
			}
			if !findMatch(g.findPattern(), "./"+p) && !findMatch(g.findPattern(), p) {
				t.Errorf("find pattern %q of %q misses %q, which the glob matches", g.findPattern(), tt.glob, p)
			}
		}
		for _, p := range tt.no {
			if g.match(p) {
				t.Errorf("%q matches %q, want no match", tt.glob, p)
			}
		}
	}
}

// findMatch is find -path PATTERN -o -path PATTERN/* as the box evaluates
// it (fnmatch without FNM_PATHNAME: * matches '/'), for patterns without
// classes.
func findMatch(pattern, p string) bool {
	return fnmatch(pattern, p) || fnmatch(pattern+"/*", p)
}

func fnmatch(pattern, s string) bool {
	if pattern == "" {
		return s == ""
	}
	switch pattern[0] {
	case '*':
		for i := 0; i <= len(s); i++ {
			if fnmatch(pattern[1:], s[i:]) {
				return true
			}
		}
		return false
	case '?':
		return s != "" && fnmatch(pattern[1:], s[1:])
	case '\\':
		pattern = pattern[1:]
	}
	return s != "" && pattern != "" && pattern[0] == s[0] && fnmatch(pattern[1:], s[1:])
}

func TestCheckRelPath(t *testing.T) {
	for _, p := range []string{"a", "a/b.txt", ".hidden", "a/..b"} {
		if err := checkRelPath(p); err != nil {
			t.Errorf("checkRelPath(%q): %v, want ok", p, err)
		}
	}
	for _, p := range []string{"", "/a", "..", "a/../b", "a//b", "./a", "a/.", `C:\a`, `\a`, "a\x00b", "a\nb"} {
		if err := checkRelPath(p); err == nil {
			t.Errorf("checkRelPath(%q) = nil, want an error", p)
		}
	}
}

func TestFetchCheck(t *testing.T) {
	tests := []struct {
		name    string
		f       Fetch
		wantErr string
	}{
		{"fine", Fetch{Globs: []string{"out/**"}, Downloads: []Download{{Remote: "./a/b.txt"}, {Remote: "c", Local: "x/c"}}}, ""},
		{"negative limit", Fetch{MaxBytes: -1}, "negative"},
		{"download escapes", Fetch{Downloads: []Download{{Remote: "a/../../b"}}}, `download "a/../../b"`},
		// The user's own local path goes where it says, outside the
		// download directory too.
		{"local outside", Fetch{Downloads: []Download{{Remote: "a", Local: "../a"}, {Remote: "b", Local: filepath.Join(os.TempDir(), "b")}}}, ""},
		{"local directory", Fetch{Downloads: []Download{{Remote: "a", Local: "out/"}}}, `download "a" to "out/": names a directory`},
		{"local dot", Fetch{Downloads: []Download{{Remote: "a", Local: "."}}}, `download "a" to ".": names a directory`},
		{"local dot-dot", Fetch{Downloads: []Download{{Remote: "a", Local: "x/.."}}}, `download "a" to "x/..": names a directory`},
		{"local root", Fetch{Downloads: []Download{{Remote: "a", Local: "/"}}}, `download "a" to "/": names a directory`},
		{"local line break", Fetch{Downloads: []Download{{Remote: "a", Local: "x\ny"}}}, "line break"},
		{"two downloads to one file", Fetch{Downloads: []Download{{Remote: "a/x"}, {Remote: "b/x"}}}, `both go to "`},
		{"two downloads to one file, spelled differently", Fetch{DownloadDir: os.TempDir(), Downloads: []Download{{Remote: "a/x"}, {Remote: "b", Local: filepath.Join(os.TempDir(), "x")}}}, `both go to "`},
	}
	for _, tt := range tests {
		err := tt.f.Check()
		if tt.wantErr == "" && err != nil || tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)) {
			t.Errorf("%s: Check() = %v, want %q", tt.name, err, tt.wantErr)
		}
	}
}

func TestChoose(t *testing.T) {
	p, err := Fetch{Globs: []string{"out/*.txt", "none/*", "all/**"}, Downloads: []Download{{Remote: "d/r.json", Local: "r.json"}}}.plan()
	if err != nil {
		t.Fatal(err)
	}
	listing := "f\x00out/a.txt\x00\x00f\x00out/b.log\x00\x00f\x00./d/r.json\x00\x00f\x00out/a.txt\x00\x00"
	sel, err := p.choose([]byte(listing))
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"d/r.json", "out/a.txt"}, sel.names); diff != "" {
		t.Errorf("names (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"none/*", "all/**"}, sel.unmatched); diff != "" {
		t.Errorf("unmatched (-want +got):\n%s", diff)
	}
	if len(sel.skipped) != 0 {
		t.Errorf("skipped %v, want none", sel.skipped)
	}
	// What cannot come home is skipped, naming it and why; the rest of
	// the listing still counts.
	for _, tt := range []struct{ listing, path, want string }{
		{"o\x00out/l.txt\x00/etc/passwd\x00", "out/l.txt", `a symlink to "/etc/passwd", outside the workdir`},
		{"o\x00out/l.txt\x00\x00", "out/l.txt", "a symlink to something crabbox could not resolve"},
		{"e\x00out\x00/etc\x00", "out", `leads to "/etc" on the box, outside the workdir`},
		{"d\x00all/sub/link\x00/w/elsewhere\x00", "all/sub/link", `a symlink to the directory "/w/elsewhere", which a glob does not follow; name it in a glob of its own (all/sub/link/**)`},
		{"n\x00all/dangling\x00\x00", "all/dangling", "a symlink to nothing"},
		{"f\x00out/new\nline.txt\x00\x00", "out/new\nline.txt", "line break"},
		{"f\x00all/x\ry\x00\x00", "all/x\ry", "line break"},
		{"f\x00all/../x\x00\x00", "all/../x", "not a clean one"},
	} {
		sel, err := p.choose([]byte(tt.listing + "f\x00d/r.json\x00\x00f\x00out/a.txt\x00\x00"))
		if err != nil {
			t.Errorf("choose(%q): %v", tt.listing, err)
			continue
		}
		if len(sel.skipped) != 1 || sel.skipped[0].Path != tt.path || !strings.Contains(sel.skipped[0].Reason, tt.want) {
			t.Errorf("choose(%q) skipped %q, want %q for %q", tt.listing, sel.skipped, tt.want, tt.path)
		}
		if diff := cmp.Diff([]string{"d/r.json", "out/a.txt"}, sel.names); diff != "" {
			t.Errorf("choose(%q) names (-want +got):\n%s", tt.listing, diff)
		}
	}
	// A missing download is skipped too.
	sel, err = p.choose([]byte("f\x00out/a.txt\x00\x00"))
	if err != nil || len(sel.skipped) != 1 || sel.skipped[0] != (Skipped{Path: "d/r.json", Reason: "no such file in the workdir on the box"}) {
		t.Errorf("missing download: skipped %v, %v", sel.skipped, err)
	}
	for _, tt := range []struct{ listing, want string }{
		{"x\x00a\x00\x00", "unknown entry kind"},
		{"f\x00a\x00", "malformed listing"},
	} {
		if _, err := p.choose([]byte(tt.listing)); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("choose(%q) error %v, want %q", tt.listing, err, tt.want)
		}
	}
	// A symlink out that no glob takes is no concern.
	if sel, err := p.choose([]byte("o\x00out/l.bin\x00/etc/passwd\x00f\x00d/r.json\x00\x00")); err != nil || len(sel.skipped) != 0 {
		t.Errorf("unmatched symlink out: skipped %v, %v", sel.skipped, err)
	}
}
