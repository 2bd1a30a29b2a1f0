package docker

import (
	"errors"
	"fmt"
	"strings"
)

// checkImageRef checks that ref names an image the way the engine parses
// names: [domain/]path[:tag], where the domain is a host name or address
// with an optional port, the path is lowercase components separated by
// '/', and the tag is at most 128 letters, digits, '_', '.' and '-' (the
// reference grammar of the Docker distribution project). Digests are
// refused: an imported image is named by its tag.
func checkImageRef(ref string) error {
	if ref == "" {
		return errors.New("the name is empty")
	}
	if strings.Contains(ref, "@") {
		return errors.New("an imported image is named name[:tag], without a digest")
	}
	name := ref
	if i := strings.LastIndexByte(ref, ':'); i > strings.LastIndexByte(ref, '/') {
		if err := checkTag(ref[i+1:]); err != nil {
			return err
		}
		name = ref[:i]
	}
	if len(name) > 255 {
		return fmt.Errorf("the name is %d characters long, more than 255", len(name))
	}
	path := name
	if i := strings.IndexByte(name, '/'); i >= 0 {
		first := name[:i]
		if strings.ContainsAny(first, ".:") || first == "localhost" || strings.ToLower(first) != first {
			if err := checkDomain(first); err != nil {
				return err
			}
			path = name[i+1:]
		}
	}
	if strings.ToLower(path) != path {
		return errors.New("the repository name must be lowercase")
	}
	for c := range strings.SplitSeq(path, "/") {
		if !pathComponent(c) {
			return fmt.Errorf("%q is not a valid name component: want lowercase letters and digits, separated by '.', '_', '__' or dashes", c)
		}
	}
	if path == name && isHex64(path) {
		return errors.New("a name cannot be 64 hexadecimal digits, which is an image ID")
	}
	return nil
}

// checkTag checks a tag: a word character, then at most 127 word
// characters, '.' or '-'.
func checkTag(tag string) error {
	if tag == "" || len(tag) > 128 {
		return fmt.Errorf("tag %q: want 1 to 128 characters", tag)
	}
	for i, r := range tag {
		if !(isAlnum(r) || r == '_' || i > 0 && (r == '.' || r == '-')) {
			return fmt.Errorf("tag %q: want letters, digits, '_', and after the first also '.' and '-'", tag)
		}
	}
	return nil
}

// checkDomain checks a registry's host[:port], the host being a DNS name
// or a bracketed IPv6 address.
func checkDomain(d string) error {
	host, port := d, ""
	if strings.HasPrefix(d, "[") {
		end := strings.IndexByte(d, ']')
		if end < 0 || strings.Trim(d[1:end], "0123456789abcdefABCDEF:.") != "" || end == 1 {
			return fmt.Errorf("registry %q: malformed IPv6 address", d)
		}
		host, port = d[:end+1], d[end+1:]
		if port != "" && port[0] != ':' {
			return fmt.Errorf("registry %q: malformed", d)
		}
		port = strings.TrimPrefix(port, ":")
	} else if h, p, ok := strings.Cut(d, ":"); ok {
		host, port = h, p
		if port == "" {
			return fmt.Errorf("registry %q: empty port", d)
		}
	}
	if strings.Trim(port, "0123456789") != "" {
		return fmt.Errorf("registry %q: port %q is not a number", d, port)
	}
	if strings.HasPrefix(host, "[") {
		return nil
	}
	for c := range strings.SplitSeq(host, ".") {
		if c == "" || c[0] == '-' || c[len(c)-1] == '-' || strings.TrimFunc(c, func(r rune) bool { return isAlnum(r) || r == '-' }) != "" {
			return fmt.Errorf("registry %q: %q is not a host name component", d, c)
		}
	}
	return nil
}

// pathComponent reports whether c is lowercase letters and digits,
// separated by '.', '_', '__' or runs of '-'.
func pathComponent(c string) bool {
	if c == "" || !isLowerAlnum(rune(c[0])) || !isLowerAlnum(rune(c[len(c)-1])) {
		return false
	}
	for i := 0; i < len(c); {
		if isLowerAlnum(rune(c[i])) {
			i++
			continue
		}
		j := i
		for j < len(c) && !isLowerAlnum(rune(c[j])) {
			j++
		}
		switch sep := c[i:j]; {
		case sep == ".", sep == "_", sep == "__", strings.Trim(sep, "-") == "":
		default:
			return false
		}
		i = j
	}
	return true
}

func isLowerAlnum(r rune) bool { return r >= 'a' && r <= 'z' || r >= '0' && r <= '9' }

func isAlnum(r rune) bool { return isLowerAlnum(r) || r >= 'A' && r <= 'Z' }

func isHex64(s string) bool {
	return len(s) == 64 && strings.Trim(s, "0123456789abcdef") == ""
}
