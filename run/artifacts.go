package run

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
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
// goes to its own local file. All of them travel in one tar stream over
// the connection, after one listing; nothing is written unless all of it
// arrived, and nothing existing is replaced unless Overwrite is set.
//
// Globs and downloads are relative to Dir and may not leave it: absolute
// paths and ".." are refused, and so are files reached through a symlink
// that leads outside Dir (a symlink inside is followed; its target's
// content is fetched). Locally nothing is written outside ArtifactsDir and
// DownloadDir, whatever the box sends.
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

// Download is one file to fetch: Remote, relative to Fetch.Dir on the box,
// to Local, relative to Fetch.DownloadDir (default: Remote's base name).
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
}

// ErrFetchTooLarge is wrapped by the error of a fetch whose files exceed
// Fetch.MaxBytes.
var ErrFetchTooLarge = errors.New("larger than the size limit")

// fetchPlan is a checked Fetch: parsed globs and cleaned download paths.
type fetchPlan struct {
	globs     []glob
	downloads []Download // Remote and Local cleaned, slash-separated
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
	locals := map[string]string{}
	for _, d := range f.Downloads {
		remotePath, err := cleanRel(d.Remote)
		if err != nil {
			return p, fmt.Errorf("download %q: %w; downloads are relative to the workdir on the box", d.Remote, err)
		}
		local := cmp.Or(d.Local, path.Base(remotePath))
		localPath, err := cleanRel(filepath.ToSlash(local))
		if err != nil {
			return p, fmt.Errorf("download %q to %q: %w; the local path is relative to where the run started and stays inside it", d.Remote, local, err)
		}
		if other, dup := locals[localPath]; dup {
			return p, fmt.Errorf("downloads %q and %q both go to %q", other, d.Remote, localPath)
		}
		locals[localPath] = d.Remote
		p.downloads = append(p.downloads, Download{Remote: remotePath, Local: localPath})
	}
	return p, nil
}

// FetchFiles brings the files f names home from the box conn reaches (see
// Fetch): one session lists the candidates, a second streams the chosen
// ones as one tar archive.
func FetchFiles(ctx context.Context, conn *ssh.Client, f Fetch) (FetchResult, error) {
	p, err := f.plan()
	if err != nil || (len(p.globs) == 0 && len(p.downloads) == 0) {
		return FetchResult{}, err
	}
	if len(p.globs) > 0 && f.ArtifactsDir == "" {
		return FetchResult{}, errors.New("artifacts: no local directory to copy them into")
	}
	var list limitedWriter
	list.max = maxListing
	if err := boxScript(ctx, conn, listScript(f.Dir, p), &list, nil); err != nil {
		return FetchResult{}, fmt.Errorf("list files to fetch in %s on the box: %w", f.Dir, err)
	}
	sel, err := p.choose(list.buf.Bytes())
	if err != nil {
		return FetchResult{}, err
	}
	if len(sel.names) == 0 {
		return FetchResult{Unmatched: sel.unmatched}, nil
	}
	st, err := f.stage(p, sel)
	if err != nil {
		return FetchResult{}, err
	}
	defer st.close()
	if err := st.checkFree(f.Overwrite); err != nil {
		return FetchResult{}, err
	}
	max := cmp.Or(f.MaxBytes, DefaultMaxFetchBytes)
	var xerr error
	err = boxScript(ctx, conn, tarScript(f.Dir, sel.names), nil, func(r io.Reader) error {
		xerr = st.extract(r, max)
		return xerr
	})
	if xerr != nil {
		st.abort()
		return FetchResult{}, xerr
	}
	if err != nil {
		st.abort()
		return FetchResult{}, fmt.Errorf("fetch files from %s on the box: %w", f.Dir, err)
	}
	files, err := st.commit(f.Overwrite)
	if err != nil {
		return FetchResult{}, err
	}
	res := FetchResult{Files: files, Unmatched: sel.unmatched}
	for _, a := range files {
		res.Bytes += a.Size
	}
	return res, nil
}

// maxListing bounds the listing of candidates a box may send.
const maxListing = 64 << 20

// classify is run by find on batches of candidates ($@): it prints, NUL
// separated, "f" PATH "" for a regular file (or a symlink to one inside
// the workdir $crabbox_w), and "o" PATH TARGET for a symlink whose target
// is outside it (or could not be resolved).
const classify = `for p do
if [ -h "$p" ]; then
	[ -f "$p" ] || continue
	t=$(readlink -f -- "$p" 2>/dev/null) || t=
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
}

// choose matches the box's listing against the globs and downloads. A
// chosen symlink that leads outside the workdir, or a start that does, is
// an error naming it; so is a download the box does not have.
func (p fetchPlan) choose(listing []byte) (selection, error) {
	sel := selection{artifact: map[string]bool{}, downloads: map[string][]int{}}
	fields := bytes.Split(listing, []byte{0})
	if len(fields)%3 != 1 || len(fields[len(fields)-1]) != 0 {
		return sel, errors.New("list files to fetch: malformed listing from the box")
	}
	matched := make([]bool, len(p.globs))
	var refused []string
	for i := 0; i+2 < len(fields); i += 3 {
		kind, name, extra := string(fields[i]), strings.TrimPrefix(string(fields[i+1]), "./"), string(fields[i+2])
		if kind == "e" {
			refused = append(refused, fmt.Sprintf("%q leads to %q on the box, outside the workdir", name, extra))
			continue
		}
		if kind != "f" && kind != "o" {
			return sel, fmt.Errorf("list files to fetch: unknown entry kind %q from the box", kind)
		}
		if err := checkRelPath(name); err != nil {
			return sel, fmt.Errorf("list files to fetch: the box listed %q: %w", name, err)
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
		if kind == "o" {
			target := "something crabbox could not resolve"
			if extra != "" {
				target = fmt.Sprintf("%q", extra)
			}
			refused = append(refused, fmt.Sprintf("%q is a symlink to %s, outside the workdir", name, target))
			continue
		}
		if _, seen := sel.downloads[name]; seen || sel.artifact[name] {
			continue // listed by two globs
		}
		sel.names = append(sel.names, name)
		sel.artifact[name] = taken
		sel.downloads[name] = downloads
	}
	if len(refused) > 0 {
		slices.Sort(refused)
		return sel, fmt.Errorf("fetch refused: %s", strings.Join(slices.Compact(refused), "; "))
	}
	for di, d := range p.downloads {
		found := false
		for _, ds := range sel.downloads {
			found = found || slices.Contains(ds, di)
		}
		if !found {
			return sel, fmt.Errorf("download %q: no such file in the workdir on the box", d.Remote)
		}
	}
	for gi, g := range p.globs {
		if !matched[gi] {
			sel.unmatched = append(sel.unmatched, g.text)
		}
	}
	slices.Sort(sel.names)
	return sel, nil
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

// openDir opens dir (created if missing, "" meaning the current
// directory) as a root nothing is written outside of. made reports whether
// it was created.
func openDir(dir string) (root *os.Root, made bool, err error) {
	dir = cmp.Or(dir, ".")
	if _, err := os.Lstat(dir); errors.Is(err, os.ErrNotExist) {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, false, err
		}
		made = true
	}
	root, err = os.OpenRoot(dir)
	return root, made, err
}
