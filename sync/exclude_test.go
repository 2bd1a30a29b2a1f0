package sync

import (
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// matcherOf builds a matcher with no built-ins from gitignore lines.
func matcherOf(lines ...string) *matcher {
	m := &matcher{dirs: [2]map[string]bool{{}, {}}}
	for _, l := range lines {
		if r, ok := parseRule(l); ok {
			m.rules = append(m.rules, r)
		}
	}
	return m
}

var matcherTests = []struct {
	name     string
	patterns []string
	// paths maps a file path to whether it is excluded.
	paths map[string]bool
}{
	{"name at any depth", []string{"*.log"}, map[string]bool{
		"a.log": true, "x/y/b.log": true, "a.log.txt": false, "log": false,
	}},
	{"negation, last match wins", []string{"*.log", "!keep.log"}, map[string]bool{
		"a.log": true, "keep.log": false, "sub/keep.log": false,
	}},
	{"negation before the pattern loses", []string{"!keep.log", "*.log"}, map[string]bool{
		"keep.log": true,
	}},
	{"no re-include inside an excluded dir", []string{"out/", "!out/keep.txt"}, map[string]bool{
		"out/keep.txt": true, "out/x": true,
	}},
	{"re-include inside dir/*", []string{"out/*", "!out/keep.txt"}, map[string]bool{
		"out/keep.txt": false, "out/x": true, "out/sub/y": true,
	}},
	{"leading slash anchors", []string{"/gen"}, map[string]bool{
		"gen": true, "gen/a": true, "src/gen": false, "src/gen/a": false,
	}},
	{"inner slash anchors", []string{"docs/*.html"}, map[string]bool{
		"docs/a.html": true, "x/docs/a.html": false, "docs/sub/a.html": false,
	}},
	{"dir only", []string{"cache/"}, map[string]bool{
		"cache": false, "cache/x": true, "a/cache/x": true, "a/cache": false,
	}},
	{"leading **", []string{"**/tmp"}, map[string]bool{
		"tmp": true, "a/tmp": true, "a/b/tmp/c": true, "atmp": false,
	}},
	{"trailing **", []string{"a/**"}, map[string]bool{
		"a/x": true, "a/b/c": true, "a": false, "b/a/x": false,
	}},
	{"inner **", []string{"a/**/b"}, map[string]bool{
		"a/b": true, "a/x/b": true, "a/x/y/b": true, "a/x/b/c": true, "a/xb": false, "c/a/b": false,
	}},
	{"**/ then a path", []string{"**/foo/bar"}, map[string]bool{
		"foo/bar": true, "x/foo/bar": true, "x/foo/bar/y": true, "foo/x/bar": false,
	}},
	{"dir-only with **", []string{"/a/**/tmp/"}, map[string]bool{
		"a/tmp/x": true, "a/b/tmp/x": true, "a/tmp": false, "b/a/tmp/x": false,
	}},
	{"doubled stars in a name", []string{"x**y"}, map[string]bool{"xy": true, "xaay": true, "x/y": false}},
	{"classes with ranges and escapes", []string{"[a-]1", `[\]]2`, "[^0-9]3"}, map[string]bool{
		"-1": true, "b1": false, "]2": true, "x3": true, "53": false,
	}},
	{"** alone", []string{"**"}, map[string]bool{"x": true, "a/b": true}},
	{"? and classes", []string{"?.o", "lib[0-9].a", "[!x]y"}, map[string]bool{
		"a.o": true, "ab.o": false, "lib3.a": true, "libx.a": false, "zy": true, "xy": false,
	}},
	{"* does not cross /", []string{"/a*b"}, map[string]bool{"axxb": true, "ax/b": false}},
	{"comments, blanks, escapes", []string{"# c", "", "   ", `\#hash`, `\!bang`, "sp\\ "}, map[string]bool{
		"# c": false, "#hash": true, "!bang": true, "sp ": true, "sp": false,
	}},
	{"trailing spaces trimmed", []string{"a.txt  "}, map[string]bool{"a.txt": true}},
	{"CRLF", []string{"a.txt\r"}, map[string]bool{"a.txt": true}},
	{"unterminated class matches nothing", []string{"a[b", "c[", "[!"}, map[string]bool{"a[b": false, "ab": false, "c[": false, "[!": false}},
	{"bare ! is nothing", []string{"!", "/"}, map[string]bool{"x": false}},
}

func TestMatcher(t *testing.T) {
	for _, tt := range matcherTests {
		t.Run(tt.name, func(t *testing.T) {
			m := matcherOf(tt.patterns...)
			got := map[string]bool{}
			for p := range tt.paths {
				got[p] = m.excluded(p, false, true)
			}
			if diff := cmp.Diff(tt.paths, got); diff != "" {
				t.Errorf("excluded (-want +got):\n%s", diff)
			}
		})
	}
}

func TestMatcherBuiltins(t *testing.T) {
	m, err := newMatcher(t.TempDir(), []string{"!dist/"})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		path    string
		tracked bool
		want    bool
	}{
		{"node_modules/x/index.js", false, true},
		{"a/b/node_modules/x.js", false, true},
		{"node_modules/x/index.js", true, false},
		{"target/debug/app", false, true},
		{"src/build/x", false, true},
		{"build", false, false}, // a file, not a directory
		{"builds/x", false, false},
		{"dist/x", false, false}, // re-included by !dist/
	}
	for _, tt := range tests {
		if got := m.excluded(tt.path, false, tt.tracked); got != tt.want {
			t.Errorf("excluded(%q, tracked=%v) = %v, want %v", tt.path, tt.tracked, got, tt.want)
		}
	}
}

func TestGlobMatch(t *testing.T) {
	tests := []struct {
		pat, name string
		want      bool
	}{
		{"*", "", true},
		{"*", "abc", true},
		{"a*c", "abbbc", true},
		{"a*c", "abbb", false},
		{"*a*a*", "xaya", true},
		{"**x", "abx", true},
		{"?", "é", true},
		{"[a-c]", "b", true},
		{"[^a-c]", "b", false},
		{"[]]", "]", true},
		{"[a-]", "-", true},
		{`[\]]`, "]", true},
		{`\*`, "*", true},
		{`\*`, "a", false},
		{`a\`, `a\`, true},
		{"[é]", "é", true},
		{"?", "\xff", true},
		{"\xff", "\xfe", false},
		{"*??", "샃", false}, // one rune; path.Match's * splits it
	}
	for _, tt := range tests {
		if got := globMatch(tt.pat, tt.name); got != tt.want {
			t.Errorf("globMatch(%q, %q) = %v, want %v", tt.pat, tt.name, got, tt.want)
		}
	}
}

func TestFileSetExcludesGit(t *testing.T) {
	needGit(t)
	root := t.TempDir()
	git(t, root, "init", "-q")
	write(t, root, "dist/app.js", "tracked\n", 0o644)
	write(t, root, "src/main.go", "package main\n", 0o644)
	write(t, root, "logs/old.log", "tracked log\n", 0o644)
	git(t, root, "add", ".")
	git(t, root, "commit", "-q", "-m", "init")
	write(t, root, "dist/tmp.js", "untracked\n", 0o644)
	write(t, root, "node_modules/x/index.js", "dep\n", 0o644)
	write(t, root, "pkg/__pycache__/m.pyc", "pyc\n", 0o644)
	write(t, root, "debug.log", "log\n", 0o644)
	write(t, root, "keep.log", "kept\n", 0o644)
	write(t, root, "secret.env", "s\n", 0o644)
	write(t, root, IgnoreFile, "# logs\n*.log\n!keep.log\n", 0o644)

	tests := []struct {
		name     string
		opts     FileSetOptions
		want     []string
		excluded int
	}{
		// logs/old.log is tracked but the user's *.log applies to it.
		{"crabboxignore", FileSetOptions{}, []string{".crabboxignore", "dist/app.js", "keep.log", "secret.env", "src/main.go"}, 5},
		{"exclude option", FileSetOptions{Exclude: []string{"*.env", "/src/"}}, []string{".crabboxignore", "dist/app.js", "keep.log"}, 7},
		{"exclude re-includes", FileSetOptions{Exclude: []string{"!debug.log", "!node_modules/"}},
			[]string{".crabboxignore", "debug.log", "dist/app.js", "keep.log", "node_modules/x/index.js", "secret.env", "src/main.go"}, 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			files, err := FileSetWith(t.Context(), root, tt.opts)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, paths(files)); diff != "" {
				t.Errorf("FileSetWith (-want +got):\n%s", diff)
			}
			p, err := MakePlanWith(t.Context(), root, tt.opts)
			if err != nil {
				t.Fatal(err)
			}
			if p.Files != len(tt.want) || p.Excluded != tt.excluded {
				t.Errorf("MakePlanWith: %d files, %d excluded; want %d, %d", p.Files, p.Excluded, len(tt.want), tt.excluded)
			}
		})
	}

	// FileSet is FileSetWith without options.
	files, err := FileSet(t.Context(), root)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(tests[0].want, paths(files)); diff != "" {
		t.Errorf("FileSet (-want +got):\n%s", diff)
	}
}

func TestFileSetExcludesWalk(t *testing.T) {
	root := t.TempDir()
	t.Setenv("GIT_CEILING_DIRECTORIES", filepath.Dir(root))
	write(t, root, "main.go", "package main\n", 0o644)
	write(t, root, "dist/app.js", "x\n", 0o644)
	write(t, root, "node_modules/a/b.js", "x\n", 0o644)
	write(t, root, "node_modules/a/c.js", "x\n", 0o644)
	write(t, root, "py/.venv/lib/x.py", "x\n", 0o644)
	write(t, root, "a.tmp", "x\n", 0o644)
	write(t, root, IgnoreFile, "*.tmp\n", 0o644)

	files, err := FileSetWith(t.Context(), root, FileSetOptions{Exclude: []string{"!dist/"}})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{".crabboxignore", "dist/app.js", "main.go"}, paths(files)); diff != "" {
		t.Errorf("FileSetWith (-want +got):\n%s", diff)
	}
	p, err := MakePlan(t.Context(), root)
	if err != nil {
		t.Fatal(err)
	}
	// dist, node_modules and py/.venv are pruned whole; a.tmp is a file.
	if p.Files != 2 || p.Excluded != 4 {
		t.Errorf("MakePlan: %d files, %d excluded; want 2, 4", p.Files, p.Excluded)
	}
}

func TestExcludeBadInput(t *testing.T) {
	root := t.TempDir()
	if _, err := newMatcher(root, []string{"a\nb"}); err == nil {
		t.Error("newMatcher accepted a pattern with a newline")
	}
	if err := os.Mkdir(filepath.Join(root, IgnoreFile), 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := FileSet(t.Context(), root); err == nil || !strings.Contains(err.Error(), IgnoreFile) {
		t.Errorf("FileSet with a .crabboxignore directory = %v, want an error naming it", err)
	}
}

func FuzzMatch(f *testing.F) {
	for _, s := range [][2]string{
		{"*.log", "a/b.log"}, {"!keep", "keep"}, {"/a/**/b/", "a/x/b/c"}, {"[!a-z]?", "Zq"},
		{`\#x`, "#x"}, {"a/**", "a"}, {"[", "["}, {"**/*\xff", "x/\xff"}, {"[]-]", "-"},
	} {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, pattern, name string) {
		if strings.ContainsAny(pattern, "\n\x00") {
			return
		}
		p := path.Clean("/" + name)[1:]
		if p == "" {
			return
		}
		// A pattern followed by its negation excludes nothing.
		m := matcherOf(pattern, "!"+strings.TrimLeft(pattern, "!"))
		if strings.HasPrefix(pattern, "!") {
			m = matcherOf(pattern, pattern)
		}
		if m.excluded(p, false, true) {
			t.Errorf("%q then its negation excludes %q", pattern, p)
		}
		// Deterministic, and a fresh matcher agrees with a cached one.
		one := matcherOf(pattern)
		got := one.excluded(p, false, true)
		if again := matcherOf(pattern).excluded(p, false, true); again != got {
			t.Errorf("%q on %q: %v then %v", pattern, p, got, again)
		}
		// On a single ASCII part without classes or escapes, globbing
		// agrees with path.Match (whose * may split a multibyte rune).
		if !strings.ContainsAny(pattern, `[\/`) && !strings.Contains(name, "/") && isASCII(name) {
			want, err := path.Match(pattern, name)
			if err == nil && globMatch(pattern, name) != want {
				t.Errorf("globMatch(%q, %q) = %v, path.Match says %v", pattern, name, !want, want)
			}
		}
	})
}

func isASCII(s string) bool {
	for i := range len(s) {
		if s[i] >= 0x80 {
			return false
		}
	}
	return true
}

func BenchmarkMatcher(b *testing.B) {
	m, err := newMatcher(b.TempDir(), []string{"*.log", "!keep.log", "/docs/**/*.html", "tmp/"})
	if err != nil {
		b.Fatal(err)
	}
	var ps []string
	for i := range 1000 {
		ps = append(ps, fmt.Sprintf("src/pkg%d/sub%d/file%d.go", i%50, i%7, i))
	}
	b.ReportAllocs()
	for b.Loop() {
		clear(m.dirs[0])
		for _, p := range ps {
			m.excluded(p, false, false)
		}
	}
}

// TestMatcherAgreesWithGit checks TestMatcher's cases with git
// check-ignore, the reference implementation.
func TestMatcherAgreesWithGit(t *testing.T) {
	needGit(t)
	for _, tt := range matcherTests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			git(t, dir, "init", "-q")
			write(t, dir, ".gitignore", strings.Join(tt.patterns, "\n")+"\n", 0o644)
			var in []string
			for p := range tt.paths {
				in = append(in, p)
			}
			cmd := exec.Command("git", "check-ignore", "--no-index", "--stdin", "-z", "-v", "-n")
			cmd.Dir = dir
			cmd.Stdin = strings.NewReader(strings.Join(in, "\x00") + "\x00")
			out, err := cmd.Output()
			if ee, ok := err.(*exec.ExitError); ok && ee.ExitCode() == 1 {
				err = nil // nothing ignored
			}
			if err != nil {
				t.Fatalf("git check-ignore: %v", err)
			}
			// Records of four fields: source, line, pattern, path.
			f := strings.Split(strings.TrimSuffix(string(out), "\x00"), "\x00")
			got := map[string]bool{}
			for i := 0; i+3 < len(f); i += 4 {
				got[f[i+3]] = f[i] != "" && !strings.HasPrefix(f[i+2], "!")
			}
			if diff := cmp.Diff(tt.paths, got); diff != "" {
				t.Errorf("git check-ignore disagrees with the want (-want +git):\n%s", diff)
			}
		})
	}
}
