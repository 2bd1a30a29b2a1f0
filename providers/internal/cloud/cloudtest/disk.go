package cloudtest

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
)

// diskSet holds the disks of a fleet's boxes and its images, each a
// directory standing for a root file system: the box path /a/b of a disk
// is <disk>/a/b.
type diskSet struct {
	dir    string   // the disks, the images and the boxes' shells
	mounts []string // box paths besides the work root that are on the disk

	mu     sync.Mutex
	next   int
	images map[string]string // name -> directory
}

// UseDisks gives every box booted from now on a disk of its own, as a
// cloud's server has: a directory of t holding the box's work root and
// each of mounts (absolute paths on the box outside its work root, which
// stand for installed software). Commands on the box name those paths as
// the box sees them, but their files are on the box's disk, so that two
// boxes of the fleet with one work root hold different files, and
// SaveImage and BootImage copy a box's files as a cloud's image does.
//
// A box with a disk runs its commands through a shell script that
// rewrites those paths to the disk's in the command line, and in the
// script of a command "sh -s" (crabbox's runs send theirs so), but not in
// other input (a synced archive); so it needs /bin/sh and sed. Its working
// directory is its work root on the disk. Paths outside the work root and
// mounts are the host's.
func (f *Fleet) UseDisks(t testing.TB, mounts ...string) {
	t.Helper()
	for _, m := range mounts {
		if !path.IsAbs(m) || path.Clean(m) != m || m == "/" {
			t.Fatalf("UseDisks: mount %q is not a clean absolute path other than /", m)
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.disks = &diskSet{dir: t.TempDir(), mounts: slices.Clone(mounts), images: map[string]string{}}
}

// newDisk makes a disk (a copy of the image named image, or empty when
// that is empty) and names the file for the shell of its box.
func (d *diskSet) newDisk(image string) (disk, shell string, err error) {
	d.mu.Lock()
	d.next++
	n := d.next
	src, ok := d.images[image]
	d.mu.Unlock()
	if image != "" && !ok {
		return "", "", fmt.Errorf("fake disk: no image %q", image)
	}
	disk = filepath.Join(d.dir, fmt.Sprintf("disk-%d", n))
	shell = filepath.Join(d.dir, fmt.Sprintf("shell-%d.sh", n))
	if image == "" {
		return disk, shell, os.MkdirAll(disk, 0o755)
	}
	if err := copyTree(src, disk); err != nil {
		return "", "", errors.Join(fmt.Errorf("fake disk from image %q: %w", image, err), os.RemoveAll(disk))
	}
	return disk, shell, nil
}

// SaveImage copies the disk of the box at ip as the image called name (a
// fake cloud's image or snapshot ID), replacing any image of that name.
// The box keeps running. It needs UseDisks.
func (f *Fleet) SaveImage(ip, name string) error {
	f.mu.Lock()
	d, b := f.disks, f.boxes[ip]
	f.mu.Unlock()
	switch {
	case d == nil:
		return errors.New("save image: the fleet has no disks (UseDisks)")
	case b == nil:
		return fmt.Errorf("save image %s: no box at %s", name, ip)
	case name == "":
		return errors.New("save image: no name")
	}
	d.mu.Lock()
	d.next++
	dir := filepath.Join(d.dir, fmt.Sprintf("image-%d", d.next))
	d.mu.Unlock()
	if err := copyTree(b.disk, dir); err != nil {
		return errors.Join(fmt.Errorf("save image %s of %s: %w", name, ip, err), os.RemoveAll(dir))
	}
	d.mu.Lock()
	old := d.images[name]
	d.images[name] = dir
	d.mu.Unlock()
	return removeDisk(old)
}

// BootImage is Boot with the new box's disk a copy of the image called
// name (SaveImage), as a cloud's server created or rebuilt from an image
// starts. It fails, starting nothing, when there is no such image.
func (f *Fleet) BootImage(ip, userData, name string) error {
	if name == "" {
		return errors.New("boot from image: no image name")
	}
	return f.boot(ip, userData, name)
}

// DeleteImage deletes the image called name; one that does not exist is
// no error.
func (f *Fleet) DeleteImage(name string) error {
	f.mu.Lock()
	d := f.disks
	f.mu.Unlock()
	if d == nil {
		return nil
	}
	d.mu.Lock()
	dir := d.images[name]
	delete(d.images, name)
	d.mu.Unlock()
	return removeDisk(dir)
}

// Images returns the names of the fleet's images, sorted.
func (f *Fleet) Images() []string {
	f.mu.Lock()
	d := f.disks
	f.mu.Unlock()
	if d == nil {
		return nil
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	names := make([]string, 0, len(d.images))
	for n := range d.images {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// removeDisk removes a disk or image directory; "" is none.
func removeDisk(dir string) error {
	if dir == "" {
		return nil
	}
	return os.RemoveAll(dir)
}

// writeDiskShell writes the shell of a box with the disk disk at file: a
// script that runs `sh -c COMMAND ARGS...` with every box path of mounts
// in COMMAND (and, for COMMAND "sh -s", in its input) rewritten to its
// place on the disk, and any other call as sh does. It returns file.
func writeDiskShell(file, disk string, mounts []string) (string, error) {
	// Longest first, so a mount inside another is rewritten as itself;
	// through markers (every mount to its marker, then every marker to its
	// place), so a rewritten path is not rewritten again.
	mounts = slices.Clone(mounts)
	slices.SortFunc(mounts, func(a, b string) int { return len(b) - len(a) })
	var to, from []string
	for i, m := range mounts {
		marker := fmt.Sprintf("@@crabbox-fake-disk-%d@@", i)
		to = append(to, "-e "+shellQuote("s|"+sedPattern(m)+"|"+marker+"|g"))
		from = append(from, "-e "+shellQuote("s|"+marker+"|"+sedReplacement(filepath.ToSlash(filepath.Join(disk, filepath.FromSlash(m))))+"|g"))
	}
	rewrite := "sed $u " + strings.Join(append(to, from...), " ")
	// The script of "sh -s" comes through a FIFO from a sed in the
	// background, so that the shell ends when sh does, while its stdin
	// stays open (crabbox's run keeps it open until the run ends).
	script := `#!/bin/sh
# The shell of a fake cloud box with a disk: box paths in the command line,
# and in the script that "sh -s" reads, are rewritten to their place on
# the disk.
u=-u
echo | sed -u p >/dev/null 2>&1 || u=-l
if [ "$#" -eq 2 ] && [ "$1" = -c ] && [ "$2" = "sh -s" ]; then
	f=` + shellQuote(file+".fifo.") + `$$
	mkfifo -m 600 "$f" || exit 125
	exec 3<&0
	` + rewrite + ` <&3 >"$f" 2>/dev/null 3<&- &
	exec <"$f" 3<&-
	rm -f "$f"
	exec /bin/sh -s
fi
if [ "$#" -ge 2 ] && [ "$1" = -c ]; then
	cmd=$(printf '%s' "$2" | ` + rewrite + `; printf x)
	cmd=${cmd%x}
	shift 2
	exec /bin/sh -c "$cmd" "$@"
fi
exec /bin/sh "$@"
`
	if err := os.WriteFile(file, []byte(script), 0o755); err != nil {
		return "", fmt.Errorf("write the shell of a disk: %w", err)
	}
	return file, nil
}

// sedPattern quotes s as a literal basic regular expression of sed, with
// | as the delimiter.
func sedPattern(s string) string {
	var b strings.Builder
	for _, r := range s {
		if strings.ContainsRune(`\.[]*^$|`, r) {
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}

// sedReplacement quotes s as a literal replacement of sed's s command,
// with | as the delimiter.
func sedReplacement(s string) string {
	var b strings.Builder
	for _, r := range s {
		if strings.ContainsRune(`\&|`, r) {
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}

// shellQuote quotes s as one word of sh.
func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// copyTree copies the directory src to dst (which must not exist): its
// directories, regular files with their modes, and symbolic links.
func copyTree(src, dst string) error {
	return filepath.WalkDir(src, func(p string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, p)
		if err != nil {
			return err
		}
		target := filepath.Join(dst, rel)
		info, err := e.Info()
		if err != nil {
			return err
		}
		switch {
		case e.IsDir():
			return os.MkdirAll(target, info.Mode().Perm()|0o700)
		case e.Type()&fs.ModeSymlink != 0:
			link, err := os.Readlink(p)
			if err != nil {
				return err
			}
			return os.Symlink(link, target)
		case e.Type().IsRegular():
			return copyFile(p, target, info.Mode().Perm())
		}
		return nil // sockets, fifos: not kept by an image either
	})
}

func copyFile(src, dst string, mode fs.FileMode) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if err != nil {
		return err
	}
	_, err = io.Copy(out, in)
	return errors.Join(err, out.Close())
}
