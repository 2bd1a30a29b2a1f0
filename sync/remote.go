package sync

import (
	"bytes"
	"fmt"
	"path"
	"slices"
	"strings"

	"github.com/crabbox-dev/crabbox/internal/remote"
)

// The box keeps, in RemoteDir/.crabbox/synced, the NUL-separated list of
// the paths the last push wrote. Only paths on that list are ever deleted.
const (
	stateDir   = ".crabbox"
	syncedList = stateDir + "/synced"
)

// maxListSize bounds the previous list read back from the box (the fail
// guardrail of 150,000 files at a generous 1 KiB per path fits).
const maxListSize = 256 << 20

// reserved reports whether p collides with crabbox's own files on the box.
func reserved(p string) bool {
	return p == syncedList || strings.HasPrefix(p, syncedList+".")
}

// readListCommand prints the previous list, or nothing on the first push.
func readListCommand(remoteDir string) string {
	f := remote.Quote(remoteDir + "/" + syncedList)
	return fmt.Sprintf("if [ -e %s ]; then cat -- %s; fi", f, f)
}

// parseList parses and validates the previous list.
func parseList(data []byte) ([]string, error) {
	var paths []string
	for rec := range bytes.SplitSeq(data, []byte{0}) {
		if len(rec) == 0 {
			continue
		}
		p := string(rec)
		if err := checkPath(p); err != nil {
			return nil, fmt.Errorf("unsafe path %q: %w", p, err)
		}
		if reserved(p) {
			return nil, fmt.Errorf("unsafe path %q: crabbox's own state", p)
		}
		paths = append(paths, p)
	}
	return paths, nil
}

// stale returns the previously synced paths that are not in files.
func stale(previous []string, files []File) []string {
	current := make(map[string]bool, len(files))
	for _, f := range files {
		current[f.Path] = true
	}
	var out []string
	for _, p := range previous {
		if !current[p] {
			current[p] = true // once
			out = append(out, p)
		}
	}
	slices.Sort(out)
	return out
}

// deleteBatch bounds the arguments of one rm or rmdir on the box.
const deleteBatch = 256

// deleteScript removes the stale paths under remoteDir, then the
// directories that held them if they are now empty. Nothing is removed
// through a symlink: every parent of a path must be a real directory.
func deleteScript(remoteDir string, paths []string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "cd -- %s || exit 1\n", remote.Quote(remoteDir))
	b.WriteString(`crabbox_safe() {
	crabbox_p=$1 crabbox_d=.
	while :; do
		case $crabbox_p in
		*/*) crabbox_d=$crabbox_d/${crabbox_p%%/*} crabbox_p=${crabbox_p#*/} ;;
		*) return 0 ;;
		esac
		[ -d "$crabbox_d" ] && [ ! -L "$crabbox_d" ] || return 1
	done
}
`)
	batch := func(cmd string, items []string) {
		for chunk := range slices.Chunk(items, deleteBatch) {
			b.WriteString("set --\n")
			for _, p := range chunk {
				q := remote.Quote(p)
				fmt.Fprintf(&b, "crabbox_safe %s && set -- \"$@\" %s\n", q, q)
			}
			fmt.Fprintf(&b, "[ $# -eq 0 ] || %s -- \"$@\" 2>/dev/null\n", cmd)
		}
	}
	batch("rm -f", paths)
	batch("rmdir", parentDirs(paths))
	b.WriteString("exit 0\n")
	return b.String()
}

// parentDirs returns the directories holding paths, deepest first, so that
// rmdir empties them bottom up.
func parentDirs(paths []string) []string {
	set := map[string]bool{}
	for _, p := range paths {
		for d := path.Dir(p); d != "."; d = path.Dir(d) {
			set[d] = true
		}
	}
	dirs := make([]string, 0, len(set))
	for d := range set {
		dirs = append(dirs, d)
	}
	slices.SortFunc(dirs, func(a, b string) int {
		if n := strings.Count(b, "/") - strings.Count(a, "/"); n != 0 {
			return n
		}
		return strings.Compare(a, b)
	})
	return dirs
}

// extractCommand creates remoteDir, extracts the archive on stdin into it
// and, only if that succeeded, moves the new list (the archive's last
// entry) into place.
func extractCommand(remoteDir, listTmp string) string {
	tmp := remote.Quote(listTmp)
	return fmt.Sprintf("mkdir -p -- %s && cd -- %s && { tar -xf - || { crabbox_s=$?; rm -f -- %s; exit $crabbox_s; }; } && mv -f -- %s %s",
		remote.Quote(remoteDir), remote.Quote(remoteDir), tmp, tmp, remote.Quote(syncedList))
}
