package sync

import (
	"errors"
	"fmt"
	"maps"
	"path"
	"path/filepath"
	"slices"
	"strings"
)

// checkPath reports whether p is a safe relative path inside a root: not
// empty, slash-separated, clean, not absolute, without "." or ".."
// elements, without NUL. It guards both the file set and the list of
// previously synced paths read back from the box, so a hostile list cannot
// name anything outside RemoteDir.
func checkPath(p string) error {
	switch {
	case p == "":
		return errors.New("empty path")
	case strings.IndexByte(p, 0) >= 0:
		return errors.New("path contains a NUL byte")
	case path.IsAbs(p) || filepath.IsAbs(p) || filepath.VolumeName(p) != "":
		return errors.New("path is absolute")
	}
	// Element by element, as path.Clean would judge it but without
	// building the cleaned path: no empty, "." or ".." elements.
	for elem := range strings.SplitSeq(p, "/") {
		switch elem {
		case "..":
			return errors.New(`path contains ".."`)
		case "", ".":
			return errors.New("path is not clean")
		}
	}
	return nil
}

// maxLinkHops bounds symlink resolution like the kernel's ELOOP limit; a
// longer chain cannot be followed on the box either.
const maxLinkHops = 40

// checkLinks rejects symlinks whose target is absolute or, followed the way
// the box will follow it (through the other symlinks of the set), leads
// outside the root. links maps each symlink's path to its slash-separated
// target.
func checkLinks(links map[string]string) error {
	if out := outsideLinks(links); len(out) > 0 {
		return fmt.Errorf("symlink %q points to %q, outside the directory being synced", out[0], links[out[0]])
	}
	return nil
}

// outsideLinks returns the paths of the symlinks whose target is absolute
// or, followed the way checkLinks follows them, leads outside the root,
// sorted.
func outsideLinks(links map[string]string) []string {
	var out []string
	for _, p := range slices.Sorted(maps.Keys(links)) {
		if escapes(links, p) {
			out = append(out, p)
		}
	}
	return out
}

// isAbsTarget reports whether a symlink target is absolute on the box or on
// the client, including Windows forms (C:\x, C:/x, \x) on every client: a
// checkout made on Windows meant them as absolute.
func isAbsTarget(target string) bool {
	if path.IsAbs(target) || filepath.IsAbs(target) || filepath.VolumeName(target) != "" || strings.HasPrefix(target, `\`) {
		return true
	}
	drive := len(target) >= 3 && target[1] == ':' && (target[2] == '/' || target[2] == '\\') &&
		('a' <= target[0]|0x20 && target[0]|0x20 <= 'z')
	return drive
}

// escapes resolves the symlink at p component by component, expanding the
// symlinks of the set it passes through, and reports whether it leaves the
// root.
func escapes(links map[string]string, p string) bool {
	cur := strings.Split(p, "/")
	cur = cur[:len(cur)-1] // a target is relative to the link's directory
	target := links[p]
	if isAbsTarget(target) {
		return true
	}
	pending := strings.Split(target, "/")
	for hops := 0; len(pending) > 0; {
		elem := pending[0]
		pending = pending[1:]
		switch elem {
		case "", ".":
			continue
		case "..":
			if len(cur) == 0 {
				return true
			}
			cur = cur[:len(cur)-1]
			continue
		}
		cur = append(cur, elem)
		next, isLink := links[strings.Join(cur, "/")]
		if !isLink {
			continue
		}
		if hops++; hops > maxLinkHops {
			return false // a loop: the box cannot follow it either
		}
		if isAbsTarget(next) {
			return true
		}
		cur = cur[:len(cur)-1]
		pending = append(strings.Split(next, "/"), pending...)
	}
	return false
}

// errNotRegular reports a path listed as a regular file that is now
// something else (a symlink, a directory, a FIFO).
var errNotRegular = errors.New("changed from a regular file while syncing")
