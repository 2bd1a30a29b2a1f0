package run

import (
	"archive/tar"
	"cmp"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/crabbox-dev/crabbox/internal/units"
)

// ErrFileExists is wrapped by the error of a fetch that would replace an
// existing local file without Fetch.Overwrite.
var ErrFileExists = errors.New("already exists")

// target is one local destination of a fetched file.
type target struct {
	root  *os.Root
	base  string // the root's absolute path
	rel   string // slash-separated, checked by checkRelPath
	kind  string
	name  string // the file's path on the box
	order int    // the file's place in FetchResult.Files
}

// stagedFile is a file written under a temporary name beside its target.
type stagedFile struct {
	t    target
	tmp  string
	size int64
}

// stager writes fetched files under temporary names and moves them into
// place only when the whole archive arrived (commit), or removes every
// trace of them (abort): a failed fetch changes nothing locally.
type stager struct {
	want     map[string][]target
	roots    []*os.Root
	madeRoot []string // directories this fetch created for its roots, deepest first
	staged   []*stagedFile
	got      map[string]*stagedFile // by name on the box: its first copy
	madeDirs []stagedDir
	nonce    string
	n        int
}

type stagedDir struct {
	root *os.Root
	rel  string
}

// stage opens the local directories of sel's files (creating them when
// missing) and says where each file goes: artifacts below ArtifactsDir,
// each download in its own file's directory.
func (f Fetch) stage(p fetchPlan, sel selection) (*stager, error) {
	nonce, err := newNonce()
	if err != nil {
		return nil, err
	}
	st := &stager{want: map[string][]target{}, got: map[string]*stagedFile{}, nonce: nonce}
	opened := map[string]*os.Root{}
	open := func(dir string) (*os.Root, string, error) {
		abs, err := filepath.Abs(cmp.Or(dir, "."))
		if err != nil {
			return nil, "", err
		}
		if root := opened[abs]; root != nil {
			return root, abs, nil
		}
		root, made, err := openDir(abs)
		if err != nil {
			return nil, "", fmt.Errorf("fetch: local directory %s: %w", abs, err)
		}
		st.roots = append(st.roots, root)
		st.madeRoot = append(st.madeRoot, made...)
		opened[abs] = root
		return root, abs, nil
	}
	for i, name := range sel.names {
		if sel.artifact[name] {
			root, base, err := open(f.ArtifactsDir)
			if err != nil {
				st.abort()
				return nil, err
			}
			st.want[name] = append(st.want[name], target{root: root, base: base, rel: name, kind: KindArtifact, name: name, order: i})
		}
		for _, di := range sel.downloads[name] {
			local := p.downloads[di].local
			root, base, err := open(filepath.Dir(local))
			if err != nil {
				st.abort()
				return nil, err
			}
			st.want[name] = append(st.want[name], target{root: root, base: base, rel: filepath.Base(local), kind: KindDownload, name: name, order: len(sel.names) + di})
		}
	}
	return st, nil
}

// local is t's absolute local path.
func (t target) local() string { return filepath.Join(t.base, filepath.FromSlash(t.rel)) }

// checkFree fails when a target exists and may not be replaced (a
// directory never may).
func (st *stager) checkFree(overwrite bool) error {
	for _, ts := range st.want {
		for _, t := range ts {
			if err := t.free(overwrite); err != nil {
				return err
			}
		}
	}
	return nil
}

func (t target) free(overwrite bool) error {
	fi, err := t.root.Lstat(t.rel)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil
	case err != nil:
		return fmt.Errorf("fetch %q to %s: %w", t.name, t.local(), err)
	case fi.IsDir():
		return fmt.Errorf("fetch %q to %s: a directory is there", t.name, t.local())
	case !overwrite:
		return fmt.Errorf("fetch %q to %s: the local file %w", t.name, t.local(), ErrFileExists)
	}
	return nil
}

// maxTrailer bounds what may follow the end of the archive (tar pads its
// output to whole records).
const maxTrailer = 1 << 20

// extract reads the tar archive r, staging each file it was asked for,
// and returns those the archive lacks, sorted. Anything else in it (a
// name not asked for, a second copy, a symlink, a device, a path that is
// not clean) or more than max bytes of content fails it.
func (st *stager) extract(r io.Reader, max int64) (missing []string, err error) {
	tr := tar.NewReader(r)
	var total int64
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("fetch: read the archive from the box: %w", err)
		}
		name := strings.TrimPrefix(hdr.Name, "./")
		targets, ok := st.want[name]
		if !ok || checkRelPath(name) != nil {
			return nil, fmt.Errorf("fetch: the box sent %q, which was not asked for", hdr.Name)
		}
		if st.got[name] != nil {
			return nil, fmt.Errorf("fetch: the box sent %q twice", hdr.Name)
		}
		var src io.Reader
		var size int64
		switch hdr.Typeflag {
		case tar.TypeReg:
			src, size = tr, hdr.Size
		case tar.TypeLink: // a hard link to a file sent before
			first := st.got[strings.TrimPrefix(hdr.Linkname, "./")]
			if first == nil {
				return nil, fmt.Errorf("fetch: the box sent %q as a link to %q, which it did not send before", hdr.Name, hdr.Linkname)
			}
			f, err := first.t.root.Open(first.tmp)
			if err != nil {
				return nil, fmt.Errorf("fetch %q: %w", hdr.Name, err)
			}
			defer f.Close()
			src, size = f, first.size
		default:
			return nil, fmt.Errorf("fetch: the box sent %q as type %q, not a regular file", hdr.Name, hdr.Typeflag)
		}
		if size < 0 || total+size > max {
			return nil, fmt.Errorf("fetch: the files exceed the size limit of %s (at %q, %s of it in files so far); nothing was kept: %w",
				FormatBytes(max), name, FormatBytes(total), ErrFetchTooLarge)
		}
		total += size
		if err := st.write(name, targets, src, size, hdr.FileInfo().Mode(), hdr.ModTime); err != nil {
			return nil, err
		}
	}
	for name := range st.want {
		if st.got[name] == nil {
			missing = append(missing, name)
		}
	}
	slices.Sort(missing)
	n, _ := io.CopyN(io.Discard, r, maxTrailer+1)
	if n > maxTrailer {
		return nil, errors.New("fetch: the box sent more than the archive")
	}
	return missing, nil
}

// write stages src (size bytes) for each of targets: the first copy from
// src, the others from the first.
func (st *stager) write(name string, targets []target, src io.Reader, size int64, mode fs.FileMode, mtime time.Time) error {
	perm := fs.FileMode(0o644)
	if mode&0o111 != 0 {
		perm = 0o755
	}
	for i, t := range targets {
		if i > 0 {
			f, err := st.got[name].t.root.Open(st.got[name].tmp)
			if err != nil {
				return fmt.Errorf("fetch %q: %w", name, err)
			}
			defer f.Close()
			src = f
		}
		sf, err := st.writeOne(t, src, size, perm, mtime)
		if err != nil {
			return fmt.Errorf("fetch %q to %s: %w", name, t.local(), err)
		}
		if i == 0 {
			st.got[name] = sf
		}
	}
	return nil
}

func (st *stager) writeOne(t target, src io.Reader, size int64, perm fs.FileMode, mtime time.Time) (*stagedFile, error) {
	dir := path.Dir(t.rel)
	if err := st.mkdirs(t.root, dir); err != nil {
		return nil, err
	}
	st.n++
	sf := &stagedFile{t: t, tmp: path.Join(dir, fmt.Sprintf(".crabbox-fetch-%s-%d", st.nonce, st.n)), size: size}
	f, err := t.root.OpenFile(sf.tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, perm)
	if err != nil {
		return nil, err
	}
	st.staged = append(st.staged, sf)
	n, err := io.CopyN(f, src, size)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, fmt.Errorf("after %d of %d bytes: %w", n, size, err)
	}
	_ = t.root.Chtimes(sf.tmp, mtime, mtime) // the box's time, where the root allows it
	return sf, nil
}

// mkdirs creates the missing directories of dir (slash-separated, in
// root), remembering them for abort.
func (st *stager) mkdirs(root *os.Root, dir string) error {
	if dir == "." {
		return nil
	}
	elems := strings.Split(dir, "/")
	for i := range elems {
		p := strings.Join(elems[:i+1], "/")
		fi, err := root.Stat(p)
		switch {
		case err == nil && fi.IsDir():
			continue
		case err == nil:
			return fmt.Errorf("%s is not a directory", p)
		case !errors.Is(err, fs.ErrNotExist):
			return err
		}
		if err := root.Mkdir(p, 0o755); err != nil {
			return err
		}
		st.madeDirs = append(st.madeDirs, stagedDir{root, p})
	}
	return nil
}

// commit moves the staged files into place and returns them in order.
func (st *stager) commit(overwrite bool) ([]Artifact, error) {
	slices.SortStableFunc(st.staged, func(a, b *stagedFile) int { return a.t.order - b.t.order })
	var out []Artifact
	for i, sf := range st.staged {
		err := sf.t.free(overwrite)
		if err == nil {
			err = sf.t.root.Rename(sf.tmp, sf.t.rel)
		}
		if err != nil {
			st.staged = st.staged[i:]
			st.abort()
			return nil, fmt.Errorf("fetch %q to %s: %w", sf.t.name, sf.t.local(), err)
		}
		out = append(out, Artifact{Kind: sf.t.kind, Remote: sf.t.name, Local: sf.t.local(), Size: sf.size})
	}
	st.staged = nil
	return out, nil
}

// abort removes the staged files and the directories made for them.
func (st *stager) abort() {
	for _, sf := range st.staged {
		_ = sf.t.root.Remove(sf.tmp)
	}
	st.staged = nil
	for _, d := range slices.Backward(st.madeDirs) {
		_ = d.root.Remove(d.rel) // only when empty
	}
	st.madeDirs = nil
	st.close()
	// Deepest first: a root's parent may have been made for another root.
	slices.SortFunc(st.madeRoot, func(a, b string) int { return len(b) - len(a) })
	removeDirs(st.madeRoot)
	st.madeRoot = nil
}

// close closes the local directories.
func (st *stager) close() {
	for _, r := range st.roots {
		r.Close()
	}
	st.roots = nil
}

// FormatBytes writes n bytes for people: "512 B", "1.5 KiB", "2.0 GiB".
func FormatBytes(n int64) string { return units.Bytes(n) }
