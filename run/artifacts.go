package run

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/crypto/ssh"

	"github.com/crabbox-dev/crabbox/internal/remote"
)

// DefaultMaxFetchBytes bounds what one Fetch brings home when
// Fetch.MaxBytes is zero: 1 GiB.
const DefaultMaxFetchBytes = 1 << 30

// Kinds of Artifact.
const (
	KindArtifact = "artifact" // a file matched by a glob
	KindDownload = "download" // a file named by a Download
	KindStdout   = "stdout"   // a captured stream (see crabbox.RunRequest)
	KindStderr   = "stderr"
)

// Fetch says which files to bring home from a box: files matching Globs
// go into ArtifactsDir with their paths relative to Dir, and each Download
// goes to its own local file. All of them travel in one tar archive, after
// one listing; nothing is written unless the whole archive arrived, and
// nothing existing is replaced unless Overwrite is set.
//
// Globs and downloads are relative to Dir and may not leave it: absolute
// paths and ".." are refused before anything happens. What the box lists
// that cannot come home safely is skipped and reported in
// FetchResult.Skipped, and the other files still come home: a symlink
// that leads outside Dir (a symlink inside is followed; its target's
// content is fetched), a glob's start that leads outside it, a symlink to
// a directory below a glob's start (never followed), a symlink to
// nothing, a name this code does not carry (one with a line break), a
// download the box does not have, and a file the box listed but did not
// send. Locally nothing from the box is written outside ArtifactsDir and
// the downloads' own files, whatever the box sends.
//
// The box needs sh, find, tar and (for symlinks) readlink -f.
type Fetch struct {
	// Dir is the directory on the box the globs and downloads are
	// relative to (relative to the login directory, or absolute).
	Dir string
	// Globs name the artifacts (see the package's glob syntax: path.Match
	// elements, ** for any number of directories; a matched directory
	// takes the files below it). A glob that matches nothing is reported
	// in FetchResult.Unmatched, not as an error.
	Globs []string
	// ArtifactsDir is the local directory artifacts are copied into;
	// it is created when needed. FetchFiles requires it with Globs.
	ArtifactsDir string
	// Downloads are single files, each copied to its Local path.
	Downloads []Download
	// DownloadDir is the local directory Download.Local is relative to
	// (default: the current directory).
	DownloadDir string
	// MaxBytes bounds the total size of what is fetched (0:
	// DefaultMaxFetchBytes). A fetch that would exceed it brings nothing.
	MaxBytes int64
	// Overwrite lets the fetch replace existing local files.
	Overwrite bool
}

// Download is one file to fetch: Remote, relative to Fetch.Dir on the box
// and never leaving it, to Local (default: Remote's base name). Local is
// the caller's own choice and goes where it says: relative to
// Fetch.DownloadDir, or absolute, ".." included; its missing directories
// are created.
type Download struct {
	Remote string
	Local  string
}

// Artifact is a file brought home from a run.
type Artifact struct {
	// Kind is KindArtifact, KindDownload, KindStdout or KindStderr.
	Kind string `json:"kind"`
	// Remote is the file's path on the box, relative to the workdir
	// (empty for a captured stream).
	Remote string `json:"remote,omitempty"`
	// Local is the absolute path of the local copy.
	Local string `json:"local"`
	Size  int64  `json:"size"`
}

// FetchResult is what Fetch brought home.
type FetchResult struct {
	// Files are the local copies, artifacts sorted by path, then the
	// downloads in request order.
	Files []Artifact
	// Bytes is their total size.
	Bytes int64
	// Unmatched are the globs that matched no file.
	Unmatched []string
	// Skipped are the files the globs and downloads named that did not
	// come home, and why, sorted by path (see Fetch).
	Skipped []Skipped
}

// Skipped is a file a fetch was asked for and did not bring home.
type Skipped struct {
	// Path is the file's path on the box, relative to Fetch.Dir, as the
	// box listed it (it may hold any byte but NUL; quote it to show it).
	Path string `json:"path"`
	// Reason says why it stayed on the box.
	Reason string `json:"reason"`
}

// ErrFetchTooLarge is wrapped by the error of a fetch whose files exceed
// Fetch.MaxBytes.
var ErrFetchTooLarge = errors.New("larger than the size limit")

// ErrIncomplete is wrapped by the error of a run whose results did not all
// come home when the caller required them all (see
// crabbox.RunRequest.ArtifactsStrict); the files that came home stay.
var ErrIncomplete = errors.New("results incomplete")

// fetchPlan is a checked Fetch: parsed globs and cleaned download paths.
type fetchPlan struct {
	globs     []glob
	downloads []plannedDownload
}

// plannedDownload is a checked Download: Remote cleaned and
// slash-separated, the local file as an absolute path.
type plannedDownload struct {
	Remote string
	local  string
}

// Check validates the globs and downloads of f without a box: it is the
// error Fetch would return for them, before anything is listed.
func (f Fetch) Check() error {
	_, err := f.plan()
	return err
}

func (f Fetch) plan() (fetchPlan, error) {
	var p fetchPlan
	if f.MaxBytes < 0 {
		return p, fmt.Errorf("fetch: negative size limit %d", f.MaxBytes)
	}
	for _, text := range f.Globs {
		g, err := parseGlob(text)
		if err != nil {
			return p, fmt.Errorf("artifacts: %w", err)
		}
		p.globs = append(p.globs, g)
	}
	base, err := filepath.Abs(cmp.Or(f.DownloadDir, "."))
	if err != nil {
		return p, fmt.Errorf("downloads: local directory %s: %w", f.DownloadDir, err)
	}
	locals := map[string]string{}
	for _, d := range f.Downloads {
		remotePath, err := cleanRel(d.Remote)
		if err != nil {
			return p, fmt.Errorf("download %q: %w; downloads are relative to the workdir on the box", d.Remote, err)
		}
		local, err := localPath(base, cmp.Or(d.Local, path.Base(remotePath)))
		if err != nil {
			return p, fmt.Errorf("download %q to %q: %w", d.Remote, d.Local, err)
		}
		if other, dup := locals[local]; dup {
			return p, fmt.Errorf("downloads %q and %q both go to %q", other, d.Remote, local)
		}
		locals[local] = d.Remote
		p.downloads = append(p.downloads, plannedDownload{Remote: remotePath, local: local})
	}
	return p, nil
}

// localPath is the absolute path of the local file the user named with
// text: relative to base, or absolute. The user's own path is trusted (it
// may leave base); it must name a file, not a directory.
func localPath(base, text string) (string, error) {
	if err := checkLocalText(text); err != nil {
		return "", err
	}
	// Judged on the text as typed: once joined to base, "." or "x/.."
	// would pass for a file named like base.
	p := filepath.Clean(filepath.FromSlash(text))
	if b := filepath.Base(p); strings.HasSuffix(text, "/") || strings.HasSuffix(text, string(filepath.Separator)) ||
		b == "." || b == ".." || b == string(filepath.Separator) {
		return "", errors.New("names a directory; name the file")
	}
	if !filepath.IsAbs(p) {
		p = filepath.Join(base, p)
	}
	return filepath.Abs(p)
}

// FetchFiles brings the files f names home from the box conn reaches (see
// Fetch): one session lists the candidates, a second streams the chosen
// ones as one tar archive.
func FetchFiles(ctx context.Context, conn *ssh.Client, f Fetch) (FetchResult, error) {
	return f.fetch(ctx, sshBox{conn})
}

// box is where a fetch lists files and gets their archive: over SSH, or a
// Sandbox.
type box interface {
	// list runs script (which prints the listing) and writes what it
	// printed to w.
	list(ctx context.Context, script string, w io.Writer) error
	// archive runs script (which prints a tar archive) and hands its
	// output to read, which consumes it to the end or fails. The error of
	// a script that failed after read succeeded is returned too.
	archive(ctx context.Context, script string, read func(io.Reader) error) error
}

// sshBox is a box reached over SSH.
type sshBox struct{ conn *ssh.Client }

func (b sshBox) list(ctx context.Context, script string, w io.Writer) error {
	return boxScript(ctx, b.conn, script, w, nil)
}

func (b sshBox) archive(ctx context.Context, script string, read func(io.Reader) error) error {
	return boxScript(ctx, b.conn, script, nil, read)
}

// fetch is FetchFiles through b.
func (f Fetch) fetch(ctx context.Context, b box) (FetchResult, error) {
	p, err := f.plan()
	if err != nil || (len(p.globs) == 0 && len(p.downloads) == 0) {
		return FetchResult{}, err
	}
	if len(p.globs) > 0 && f.ArtifactsDir == "" {
		return FetchResult{}, errors.New("artifacts: no local directory to copy them into")
	}
	list := limitedWriter{max: maxListing}
	if err := b.list(ctx, listScript(f.Dir, p), &list); err != nil {
		return FetchResult{}, fmt.Errorf("list files to fetch in %s on the box: %w", f.Dir, err)
	}
	sel, err := p.choose(list.buf.Bytes())
	if err != nil {
		return FetchResult{}, err
	}
	res := FetchResult{Unmatched: sel.unmatched, Skipped: sel.skipped} // sorted by choose
	if len(sel.names) == 0 {
		return res, nil
	}
	st, err := f.stage(p, sel)
	if err != nil {
		return FetchResult{}, err
	}
	defer st.close()
	if err := st.checkFree(f.Overwrite); err != nil {
		st.abort()
		return FetchResult{}, err
	}
	max := cmp.Or(f.MaxBytes, DefaultMaxFetchBytes)
	var missing []string
	var xerr error
	var got countingReader
	err = b.archive(ctx, tarScript(f.Dir, sel.names), func(r io.Reader) error {
		got.r = r
		missing, xerr = st.extract(&got, max)
		return xerr
	})
	switch {
	case xerr != nil:
		st.abort()
		return FetchResult{}, xerr
	case ctx.Err() != nil:
		st.abort()
		return FetchResult{}, fmt.Errorf("fetch files from %s on the box: %w", f.Dir, ctx.Err())
	case err != nil && got.n == 0: // no archive at all
		st.abort()
		return FetchResult{}, fmt.Errorf("fetch files from %s on the box: %w", f.Dir, err)
	}
	// The archive arrived whole; what it lacks stays on the box.
	why := "the box listed it but did not send it (it changed since it was listed?)"
	if err != nil {
		why = "the box could not send it: " + oneLine(err.Error())
	}
	for _, name := range missing {
		res.Skipped = append(res.Skipped, Skipped{Path: name, Reason: why})
	}
	sortSkipped(res.Skipped)
	files, err := st.commit(f.Overwrite)
	if err != nil {
		return FetchResult{}, err
	}
	res.Files = files
	for _, a := range files {
		res.Bytes += a.Size
	}
	return res, nil
}

// sortSkipped sorts skipped files by path.
func sortSkipped(s []Skipped) {
	slices.SortStableFunc(s, func(a, b Skipped) int { return strings.Compare(a.Path, b.Path) })
}

// oneLine is s on one line: its runs of white space are single spaces.
func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

// countingReader counts what is read through it.
type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

// maxListing bounds the listing of candidates a box may send.
const maxListing = 64 << 20

// classify is run by find on batches of candidates ($@): it prints, NUL
// separated, "f" PATH "" for a regular file (or a symlink to one inside
// the workdir $crabbox_w), "o" PATH TARGET for a symlink to a file outside
// it (or one that could not be resolved), "d" PATH TARGET for a symlink to
// a directory (find does not follow it), and "n" PATH "" for a symlink to
// nothing.
const classify = `for p do
if [ -h "$p" ]; then
	if [ ! -e "$p" ]; then printf 'n\0%s\0\0' "$p"; continue; fi
	t=$(readlink -f -- "$p" 2>/dev/null) || t=
	if [ -d "$p" ]; then printf 'd\0%s\0%s\0' "$p" "$t"; continue; fi
	[ -f "$p" ] || continue
	case $t in "$crabbox_w"/*) printf 'f\0%s\0\0' "$p" ;; *) printf 'o\0%s\0%s\0' "$p" "$t" ;; esac
elif [ -f "$p" ]; then printf 'f\0%s\0\0' "$p"; fi
done`

// listFuncs defines crabbox_list START PATTERN: the candidates below (or
// at) START whose path matches PATTERN or lies below a match, classified.
// A START whose directory leads outside the workdir (through a symlink) is
// reported as "e" START WHERE instead.
const listFuncs = `crabbox_w=$(pwd -P) || exit 3
export crabbox_w
crabbox_list() {
	if [ -d "$1" ]; then crabbox_d=$1
	elif [ -e "$1" ] || [ -h "$1" ]; then
		case $1 in */*) crabbox_d=${1%/*} ;; *) crabbox_d=. ;; esac
	else return 0; fi
	crabbox_r=$(cd -P -- "$crabbox_d" 2>/dev/null && pwd -P) || return 0
	case $crabbox_r in "$crabbox_w"|"$crabbox_w"/*) ;; *) printf 'e\0%s\0%s\0' "$1" "$crabbox_r"; return 0 ;; esac
	find -H "$1" \( -path "$2" -o -path "$2/*" \) \( -type f -o -type l \) -exec sh -c ` + "\"$crabbox_c\"" + ` sh {} + || :
}
`

// listScript lists the candidates for p's globs and downloads in dir.
func listScript(dir string, p fetchPlan) string {
	var b strings.Builder
	fmt.Fprintf(&b, "cd -- %s || exit 3\n", remote.Quote(cmp.Or(dir, ".")))
	fmt.Fprintf(&b, "crabbox_c=%s\n", remote.Quote(classify))
	b.WriteString(listFuncs)
	for _, g := range p.globs {
		fmt.Fprintf(&b, "crabbox_list %s %s\n", remote.Quote(g.start), remote.Quote(g.findPattern()))
	}
	for _, d := range p.downloads {
		fmt.Fprintf(&b, "crabbox_list %s %s\n", remote.Quote(d.Remote), remote.Quote(escapeFind(d.Remote)))
	}
	return b.String()
}

// tarScript streams names (relative to dir) as a tar archive, following
// symlinks (the listing checked they stay inside).
func tarScript(dir string, names []string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "cd -- %s || exit 3\nset --", remote.Quote(cmp.Or(dir, ".")))
	for _, n := range names {
		b.WriteString(" \\\n")
		b.WriteString(remote.Quote(n))
	}
	b.WriteString("\nexec tar -c -h -f - -- \"$@\"\n")
	return b.String()
}

// selection is what a listing leaves to fetch.
type selection struct {
	// names are the files to fetch, sorted; kinds says for each whether
	// a glob took it (artifact) and which downloads name it.
	names     []string
	artifact  map[string]bool
	downloads map[string][]int
	unmatched []string
	// skipped are the files asked for that cannot be fetched.
	skipped []Skipped
}

// choose matches the box's listing against the globs and downloads. What
// they name that cannot come home (see Fetch) is skipped, with the reason;
// only a listing that is not one is an error.
func (p fetchPlan) choose(listing []byte) (selection, error) {
	sel := selection{artifact: map[string]bool{}, downloads: map[string][]int{}}
	fields := bytes.Split(listing, []byte{0})
	if len(fields)%3 != 1 || len(fields[len(fields)-1]) != 0 {
		return sel, errors.New("list files to fetch: malformed listing from the box")
	}
	matched := make([]bool, len(p.globs))
	skipped := map[string]string{}
	for i := 0; i+2 < len(fields); i += 3 {
		kind, name, extra := string(fields[i]), strings.TrimPrefix(string(fields[i+1]), "./"), string(fields[i+2])
		if !strings.Contains("efodn", kind) || len(kind) != 1 {
			return sel, fmt.Errorf("list files to fetch: unknown entry kind %q from the box", kind)
		}
		if kind == "e" {
			skipped[name] = fmt.Sprintf("leads to %s on the box, outside the workdir", quoteTarget(extra))
			continue
		}
		taken := false
		for gi, g := range p.globs {
			if g.match(name) {
				matched[gi], taken = true, true
			}
		}
		var downloads []int
		for di, d := range p.downloads {
			if d.Remote == name {
				downloads = append(downloads, di)
			}
		}
		if !taken && len(downloads) == 0 {
			continue
		}
		if why := skipReason(kind, name, extra); why != "" {
			skipped[name] = why
			continue
		}
		if _, seen := sel.downloads[name]; seen || sel.artifact[name] {
			continue // listed by two globs
		}
		sel.names = append(sel.names, name)
		sel.artifact[name] = taken
		sel.downloads[name] = downloads
	}
	for di, d := range p.downloads {
		found := false
		for _, ds := range sel.downloads {
			found = found || slices.Contains(ds, di)
		}
		if _, why := skipped[d.Remote]; !found && !why {
			skipped[d.Remote] = "no such file in the workdir on the box"
		}
	}
	for gi, g := range p.globs {
		if !matched[gi] {
			sel.unmatched = append(sel.unmatched, g.text)
		}
	}
	for _, name := range slices.Sorted(maps.Keys(skipped)) {
		sel.skipped = append(sel.skipped, Skipped{Path: name, Reason: skipped[name]})
	}
	slices.Sort(sel.names)
	return sel, nil
}

// skipReason says why the listed file name of the given kind cannot be
// fetched, or "" when it can.
func skipReason(kind, name, extra string) string {
	switch {
	case strings.ContainsAny(name, "\n\r"):
		return "its name holds a line break, which crabbox does not bring home"
	case checkRelPath(name) != nil:
		return fmt.Sprintf("the box listed a path that is not a clean one below the workdir (%v)", checkRelPath(name))
	case kind == "o":
		return fmt.Sprintf("a symlink to %s, outside the workdir", quoteTarget(extra))
	case kind == "d":
		return fmt.Sprintf("a symlink to the directory %s, which a glob does not follow; name it in a glob of its own (%s/**) to fetch what it holds", quoteTarget(extra), name)
	case kind == "n":
		return "a symlink to nothing"
	}
	return ""
}

// quoteTarget quotes a symlink's target as the box resolved it.
func quoteTarget(t string) string {
	if t == "" {
		return "something crabbox could not resolve"
	}
	return fmt.Sprintf("%q", t)
}

// boxScript runs script with sh on the box in a session of its own,
// writing its stdout to w, or handing it to read (which must consume it to
// the end or fail). A failing read ends the session at once.
func boxScript(ctx context.Context, conn *ssh.Client, script string, w io.Writer, read func(io.Reader) error) error {
	sess, err := remote.NewSession(ctx, conn)
	if err != nil {
		return fmt.Errorf("open SSH session: %w", err)
	}
	defer sess.Close()
	stop := context.AfterFunc(ctx, func() { sess.Close() })
	defer stop()
	stderr := &tailWriter{}
	sess.Stderr = stderr
	sess.Stdin = strings.NewReader(script)
	var out io.Reader
	if read != nil {
		if out, err = sess.StdoutPipe(); err != nil {
			return err
		}
	} else {
		sess.Stdout = w
	}
	if err := sess.Start("sh -s"); err != nil {
		return fmt.Errorf("start sh on the box: %w", err)
	}
	var readErr error
	if read != nil {
		if readErr = read(out); readErr != nil {
			sess.Close()
		}
	}
	err = sess.Wait()
	switch {
	case ctx.Err() != nil:
		return ctx.Err()
	case readErr != nil:
		return readErr
	case err != nil:
		if tail := stderr.Tail(); tail != "" {
			return fmt.Errorf("%w: %s", err, tail)
		}
		return err
	}
	return nil
}

// limitedWriter buffers up to max bytes and fails past them.
type limitedWriter struct {
	buf bytes.Buffer
	max int
}

func (l *limitedWriter) Write(p []byte) (int, error) {
	if l.buf.Len()+len(p) > l.max {
		return 0, fmt.Errorf("more than %d bytes", l.max)
	}
	return l.buf.Write(p)
}

// openDir opens dir (created with its missing parents, "" meaning the
// current directory) as a root nothing is written outside of. made are
// the directories it created, deepest first.
func openDir(dir string) (root *os.Root, made []string, err error) {
	made, err = mkdirAll(cmp.Or(dir, "."))
	if err != nil {
		return nil, made, err
	}
	root, err = os.OpenRoot(cmp.Or(dir, "."))
	return root, made, err
}

// mkdirAll is os.MkdirAll that returns the directories it created,
// deepest first, so that a caller can remove them again.
func mkdirAll(dir string) ([]string, error) {
	var missing []string
	for d := filepath.Clean(dir); ; {
		if _, err := os.Lstat(d); err == nil || !errors.Is(err, os.ErrNotExist) {
			break
		}
		missing = append(missing, d)
		parent := filepath.Dir(d)
		if parent == d {
			break
		}
		d = parent
	}
	if len(missing) == 0 {
		return nil, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	return missing, nil
}

// removeDirs removes dirs (deepest first) where they are empty.
func removeDirs(dirs []string) {
	for _, d := range dirs {
		_ = os.Remove(d)
	}
}
