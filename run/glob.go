package run

import (
	"errors"
	"fmt"
	"path"
	"path/filepath"
	"strings"
)

// A glob names files on the box relative to a workdir. Its path elements
// are separated by '/'; each is a path.Match pattern (*, ? and [...] never
// match '/', and they do match a leading '.'), or "**", which matches any
// number of path elements, none included. A glob that matches a directory
// takes every file below it.
type glob struct {
	text  string
	elems []string
	// start is the glob's literal leading path ("." when it has none):
	// the box lists files only below it.
	start string
}

// parseGlob checks a glob and splits it. A glob that could reach outside
// the workdir (absolute, or with a ".." element) is refused; "." and empty
// elements are dropped.
func parseGlob(text string) (glob, error) {
	g := glob{text: text}
	if err := checkLocalText(text); err != nil {
		return g, fmt.Errorf("glob %q: %w", text, err)
	}
	if isAbsolute(text) {
		return g, fmt.Errorf("glob %q: absolute; globs are relative to the workdir on the box", text)
	}
	var lit []string
	literal := true
	for e := range strings.SplitSeq(text, "/") {
		switch {
		case e == "" || e == ".":
			continue
		case e == "..":
			return g, fmt.Errorf("glob %q: a %q element would leave the workdir", text, e)
		case e != "**" && strings.Contains(e, "**"):
			return g, fmt.Errorf("glob %q: ** must be a whole path element (as in a/**/b)", text)
		}
		if _, err := path.Match(e, ""); err != nil {
			return g, fmt.Errorf("glob %q: malformed pattern %q", text, e)
		}
		if literal && !hasMeta(e) {
			lit = append(lit, e)
		} else {
			literal = false
		}
		g.elems = append(g.elems, e)
	}
	if len(g.elems) == 0 {
		return g, fmt.Errorf("glob %q: names the whole workdir; use ** for every file in it", text)
	}
	g.start = "."
	if len(lit) > 0 {
		g.start = strings.Join(lit, "/")
	}
	return g, nil
}

// hasMeta reports whether a path element has pattern characters.
func hasMeta(e string) bool { return strings.ContainsAny(e, `*?[\`) }

// checkLocalText rejects what no path on the box can hold, or what this
// code will not carry into a shell script: empty text, NUL and newlines.
func checkLocalText(s string) error {
	switch {
	case strings.TrimSpace(s) == "":
		return errors.New("empty")
	case strings.ContainsAny(s, "\x00\n\r"):
		return errors.New("contains a NUL byte or a line break")
	}
	return nil
}

// isAbsolute reports whether p is absolute on the box or on this machine,
// or names a Windows drive (C:\x, C:x) or root (\x) on any of them.
func isAbsolute(p string) bool {
	drive := len(p) >= 2 && p[1] == ':' && 'a' <= p[0]|0x20 && p[0]|0x20 <= 'z'
	return drive || path.IsAbs(p) || filepath.IsAbs(p) || filepath.VolumeName(p) != "" || strings.HasPrefix(p, `\`)
}

// match reports whether the glob takes the file at p (a clean relative
// path): the glob matches p or one of its parent directories.
func (g glob) match(p string) bool {
	name := strings.Split(p, "/")
	for n := 1; n <= len(name); n++ {
		if matchElems(g.elems, name[:n]) {
			return true
		}
	}
	return false
}

func matchElems(pat, name []string) bool {
	for len(pat) > 0 {
		if pat[0] == "**" {
			for i := 0; i <= len(name); i++ {
				if matchElems(pat[1:], name[i:]) {
					return true
				}
			}
			return false
		}
		if len(name) == 0 {
			return false
		}
		if ok, _ := path.Match(pat[0], name[0]); !ok {
			return false
		}
		pat, name = pat[1:], name[1:]
	}
	return len(name) == 0
}

// findPattern is a pattern for find -path that matches, as find prints
// them from start, at least the paths the glob matches (find's * also
// matches '/', so it may match more; match decides).
func (g glob) findPattern() string {
	var b strings.Builder
	b.WriteString(escapeFind(g.start))
	rest := g.elems
	if g.start != "." {
		rest = rest[strings.Count(g.start, "/")+1:]
	}
	joined := false // the last ** already stands for the '/' that follows it
	for _, e := range rest {
		if e == "**" {
			if !joined {
				b.WriteString("/")
			}
			b.WriteString("*")
			joined = true
			continue
		}
		if !joined {
			b.WriteString("/")
		}
		joined = false
		if strings.ContainsAny(e, `[\`) {
			e = "*" // classes and escapes differ between path.Match and fnmatch
		}
		b.WriteString(e)
	}
	return b.String()
}

// escapeFind quotes the pattern characters of a literal path for find
// -path.
func escapeFind(p string) string {
	var b strings.Builder
	for _, r := range p {
		if strings.ContainsRune(`*?[\`, r) {
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}

// checkRelPath reports whether p is a clean relative path below a
// directory: not empty, slash-separated, not absolute, without "", "." or
// ".." elements, NUL or line breaks.
func checkRelPath(p string) error {
	if err := checkLocalText(p); err != nil {
		return err
	}
	if isAbsolute(p) {
		return errors.New("absolute")
	}
	for e := range strings.SplitSeq(p, "/") {
		switch e {
		case "..":
			return errors.New(`a ".." element leaves the directory`)
		case "", ".":
			return errors.New("not a clean path (empty or . elements)")
		}
	}
	return nil
}

// cleanRel cleans a relative path a user typed ("./a//b" is "a/b"), then
// checks it with checkRelPath.
func cleanRel(p string) (string, error) {
	if err := checkLocalText(p); err != nil {
		return "", err
	}
	if isAbsolute(p) {
		return "", errors.New("absolute")
	}
	for e := range strings.SplitSeq(p, "/") {
		if e == ".." {
			return "", errors.New(`a ".." element leaves the directory`)
		}
	}
	c := path.Clean(p)
	if err := checkRelPath(c); err != nil {
		return "", err
	}
	return c, nil
}
