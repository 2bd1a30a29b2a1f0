package sync

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"unicode/utf8"
)

// IgnoreFile is the name of the file at the root of a checkout whose
// gitignore-syntax patterns leave files out of a sync. Only the root's
// file is read; files of that name in subdirectories are synced like any
// other file and have no effect.
const IgnoreFile = ".crabboxignore"

// builtinExcludes are the dependency and build output directories a sync
// leaves out when git does not track them: they are usually large,
// regenerated on the box and platform-specific. Each name matches a
// directory (never a file) of exactly that name at any depth.
var builtinExcludes = []string{
	// JavaScript and TypeScript.
	"node_modules", ".next", ".nuxt", ".svelte-kit", ".turbo", ".parcel-cache",
	// Python.
	".venv", "venv", "__pycache__", ".pytest_cache", ".mypy_cache", ".ruff_cache", ".tox",
	// JVM, Rust and generic build output.
	"target", "build", "dist", ".gradle",
	// Caches and reports.
	".cache", "coverage", ".terraform",
}

// BuiltinExcludes returns the names of the directories a sync leaves out
// unless git tracks the files in them (see FileSetWith).
func BuiltinExcludes() []string { return slices.Clone(builtinExcludes) }

// rule is one parsed gitignore pattern.
type rule struct {
	// segs are the pattern's slash-separated parts; "**" is a part of its
	// own. An unanchored pattern starts with "**".
	segs    []string
	negate  bool
	dirOnly bool
	// builtin rules never apply to tracked files.
	builtin bool
	// name, if set, is the only part after a leading "**" and has no
	// wildcards: the rule matches paths whose last part is name.
	name string
}

// parseRule parses one line of gitignore syntax. It reports false for
// blank lines and comments.
func parseRule(line string) (rule, bool) {
	line = strings.TrimSuffix(line, "\r")
	line = trimTrailingSpace(line)
	if line == "" || line[0] == '#' {
		return rule{}, false
	}
	var r rule
	switch {
	case line[0] == '!':
		r.negate = true
		line = line[1:]
	case strings.HasPrefix(line, `\!`), strings.HasPrefix(line, `\#`):
		line = line[1:]
	}
	if strings.HasSuffix(line, "/") {
		r.dirOnly = true
		line = strings.TrimRight(line, "/")
	}
	anchored := strings.Contains(line, "/")
	for s := range strings.SplitSeq(line, "/") {
		if s != "" {
			r.segs = append(r.segs, s)
		}
	}
	if len(r.segs) == 0 {
		return rule{}, false
	}
	if !anchored && r.segs[0] != "**" {
		r.segs = append([]string{"**"}, r.segs...)
	}
	r.setName()
	return r, true
}

func (r *rule) setName() {
	if len(r.segs) == 2 && r.segs[0] == "**" && !strings.ContainsAny(r.segs[1], `*?[\`) {
		r.name = r.segs[1]
	}
}

// trimTrailingSpace removes trailing spaces, except one escaped with a
// backslash.
func trimTrailingSpace(s string) string {
	for strings.HasSuffix(s, " ") && !strings.HasSuffix(s, `\ `) {
		s = s[:len(s)-1]
	}
	return s
}

// match reports whether the rule's pattern matches the path whose parts
// are parts.
func (r *rule) match(parts []string, isDir bool) bool {
	if r.dirOnly && !isDir {
		return false
	}
	if r.name != "" {
		return parts[len(parts)-1] == r.name
	}
	return matchSegs(r.segs, parts)
}

// matchSegs matches pattern parts against path parts. A leading or inner
// "**" matches zero or more parts, a trailing one one or more (so "a/**"
// matches what is inside a, not a itself).
func matchSegs(pat, path []string) bool {
	// ok[i][j]: pat[i:] matches path[j:]; filled from the end.
	n := len(path) + 1
	ok := make([]bool, (len(pat)+1)*n)
	ok[len(pat)*n+len(path)] = true
	for i := len(pat) - 1; i >= 0; i-- {
		for j := len(path); j >= 0; j-- {
			var v bool
			switch {
			case pat[i] == "**" && i == len(pat)-1:
				v = j < len(path)
			case pat[i] == "**":
				v = ok[(i+1)*n+j] || (j < len(path) && ok[i*n+j+1])
			default:
				v = j < len(path) && ok[(i+1)*n+j+1] && globMatch(pat[i], path[j])
			}
			ok[i*n+j] = v
		}
	}
	return ok[0]
}

// globMatch matches one path part against one pattern part: "*" matches
// any run of characters, "?" any one, "[...]" a class ("[!...]" or
// "[^...]" negated, with ranges), and "\" quotes the next character. A
// pattern with an unterminated "[" matches nothing, as in git.
func globMatch(pat, name string) bool {
	var px, nx int
	starPx, starNx := -1, -1
	for px < len(pat) || nx < len(name) {
		if px < len(pat) {
			switch c := pat[px]; c {
			case '*':
				starPx, starNx = px, nx
				px++
				continue
			case '?':
				if nx < len(name) {
					_, size := decodeRune(name[nx:])
					px++
					nx += size
					continue
				}
			case '[':
				if nx == len(name) {
					break
				}
				r, size := decodeRune(name[nx:])
				matched, end, ok := matchClass(pat[px:], r)
				if !ok {
					return false // unterminated: matches nothing, as in git
				}
				if matched {
					px += end
					nx += size
					continue
				}
			case '\\':
				lit := byte('\\')
				adv := 1
				if px+1 < len(pat) {
					lit, adv = pat[px+1], 2
				}
				if nx < len(name) && name[nx] == lit {
					px += adv
					nx++
					continue
				}
			default:
				if nx < len(name) && name[nx] == c {
					px++
					nx++
					continue
				}
			}
		}
		// Mismatch: let the last star take one more character.
		if starPx >= 0 && starNx < len(name) {
			_, size := decodeRune(name[starNx:])
			starNx += size
			px, nx = starPx+1, starNx
			continue
		}
		return false
	}
	return true
}

// matchClass matches r against the class at the start of pat ("[...]").
// It returns the class's length, and false if the class is unterminated.
func matchClass(pat string, r rune) (matched bool, end int, ok bool) {
	i := 1
	negate := false
	if i < len(pat) && (pat[i] == '!' || pat[i] == '^') {
		negate = true
		i++
	}
	first := true
	for i < len(pat) {
		if pat[i] == ']' && !first {
			return matched != negate, i + 1, true
		}
		first = false
		lo, size := classChar(pat[i:])
		if size == 0 {
			return false, 0, false
		}
		i += size
		hi := lo
		if i+1 < len(pat) && pat[i] == '-' && pat[i+1] != ']' {
			h, s := classChar(pat[i+1:])
			if s == 0 {
				return false, 0, false
			}
			hi = h
			i += 1 + s
		}
		if lo <= r && r <= hi {
			matched = true
		}
	}
	return false, 0, false
}

// classChar reads one, possibly escaped, character of a class.
func classChar(s string) (rune, int) {
	if s[0] == '\\' {
		if len(s) < 2 {
			return 0, 0
		}
		r, size := decodeRune(s[1:])
		return r, 1 + size
	}
	return decodeRune(s)
}

// decodeRune is utf8.DecodeRuneInString, except that an invalid byte is
// a character of its own rather than U+FFFD, so it matches only itself.
func decodeRune(s string) (rune, int) {
	r, size := utf8.DecodeRuneInString(s)
	if r == utf8.RuneError && size == 1 {
		return utf8.MaxRune + 1 + rune(s[0]), 1
	}
	return r, size
}

// matcher decides which listed paths a sync leaves out: the built-in
// directories (for untracked paths only), then the root's .crabboxignore,
// then the caller's patterns. Among the gitignore patterns the last one
// that matches a path decides, and, as in git, a path inside an excluded
// directory cannot be re-included. A "!" pattern can re-include a
// built-in directory's untracked files.
type matcher struct {
	rules []rule
	// source is what the rules were made of (.crabboxignore, then the
	// extra patterns), for the untracked cache's key.
	source []byte
	// dirs caches the decision for directories, by tracked-ness.
	dirs [2]map[string]bool
}

// newMatcher builds the matcher for root with the extra patterns.
func newMatcher(root string, extra []string) (*matcher, error) {
	m := &matcher{dirs: [2]map[string]bool{{}, {}}}
	for _, name := range builtinExcludes {
		r := rule{segs: []string{"**", name}, dirOnly: true, builtin: true}
		r.setName()
		m.rules = append(m.rules, r)
	}
	data, err := os.ReadFile(filepath.Join(root, IgnoreFile))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("read %s: %w", IgnoreFile, err)
	}
	for line := range strings.SplitSeq(strings.TrimPrefix(string(data), "\uFEFF"), "\n") {
		if r, ok := parseRule(line); ok {
			m.rules = append(m.rules, r)
		}
	}
	m.source = append(data, 0)
	for _, p := range extra {
		if strings.ContainsAny(p, "\n\x00") {
			return nil, fmt.Errorf("exclude pattern %q contains a newline or NUL byte", p)
		}
		m.source = append(append(m.source, p...), '\n')
		if r, ok := parseRule(p); ok {
			m.rules = append(m.rules, r)
		}
	}
	return m, nil
}

// clone returns a matcher with the same rules and a cache of its own, for
// another goroutine.
func (m *matcher) clone() *matcher {
	return &matcher{rules: m.rules, source: m.source, dirs: [2]map[string]bool{{}, {}}}
}

// excluded reports whether the clean, slash-separated path p, a file (or
// a directory if isDir), is left out.
func (m *matcher) excluded(p string, isDir, tracked bool) bool {
	if tracked && len(m.rules) == len(builtinExcludes) {
		return false // the built-ins never leave out tracked files
	}
	if i := strings.LastIndexByte(p, '/'); i >= 0 && m.dirExcluded(p[:i], tracked) {
		return true
	}
	return m.decide(p, isDir, tracked)
}

func (m *matcher) dirExcluded(dir string, tracked bool) bool {
	t := 0
	if tracked {
		t = 1
	}
	if v, ok := m.dirs[t][dir]; ok {
		return v
	}
	v := m.excluded(dir, true, tracked)
	m.dirs[t][dir] = v
	return v
}

// decide applies the last rule matching p itself.
func (m *matcher) decide(p string, isDir, tracked bool) bool {
	parts := strings.Split(p, "/")
	for i := len(m.rules) - 1; i >= 0; i-- {
		r := &m.rules[i]
		if r.builtin && tracked {
			continue
		}
		if r.match(parts, isDir) {
			return !r.negate
		}
	}
	return false
}
