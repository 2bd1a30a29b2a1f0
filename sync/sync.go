// Package sync copies a checkout to a box over an established SSH
// connection.
//
// FileSet decides what is copied (a git checkout's tracked and untracked,
// non-ignored files, as they are in the working tree) and rejects paths and
// symlinks that would land outside the destination. Push streams those files
// as one tar archive into `tar -xf -` on the box, so any POSIX box with sh
// and tar works and nothing but git is needed on the client.
//
// The box keeps the list of paths crabbox synced in
// RemoteDir/.crabbox/synced. A later push deletes the paths on that list
// that are no longer in the file set, and nothing else: files the command
// created on the box stay.
//
// This first version sends every file on every push; the incremental
// version compares manifests and sends only what changed.
package sync

import (
	"archive/tar"
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/crabbox-dev/crabbox/internal/remote"

	"golang.org/x/crypto/ssh"
)

// Options says what Push copies where.
type Options struct {
	// Root is the local directory to copy, usually a git checkout's top.
	Root string
	// RemoteDir is the directory on the box to copy into; it is created
	// if missing. A relative path is relative to the login directory.
	RemoteDir string
	// Progress, if set, is called after each file is sent with the
	// number of files and bytes of content sent so far.
	Progress func(files int, bytes int64)
	// Limits are the guardrails checked before anything moves; nil means
	// DefaultLimits. Force ignores the Max limits.
	Limits *Limits
	Force  bool
	// Warn, if set, receives the warning of a sync past a Warn limit.
	Warn func(string)
}

// Stats describes a finished push.
type Stats struct {
	// Files is the number of files and symlinks sent.
	Files int
	// Bytes is the total size of the regular files' content sent.
	Bytes int64
	// Duration is the wall time of the whole push.
	Duration time.Duration
}

// Push copies the file set of opts.Root into opts.RemoteDir on the box and
// deletes what the previous push copied that is no longer in the set. Files
// are sent as they are read, in one tar stream, never held in memory whole.
// Files that disappear locally while the push runs are left out; a file
// that grows is sent as it was when opened.
//
// Nothing is transferred when the file set is invalid. If the transfer
// fails, the box may hold part of the new files, but the list of synced
// paths is only replaced after a complete extraction, so the next push still
// knows what to clean up.
//
// Two pushes to the same RemoteDir at the same time are not coordinated.
func Push(ctx context.Context, client *ssh.Client, opts Options) (Stats, error) {
	start := time.Now()
	fail := func(err error) (Stats, error) {
		return Stats{Duration: time.Since(start)}, fmt.Errorf("sync %s to %s: %w", opts.Root, opts.RemoteDir, err)
	}
	switch {
	case opts.Root == "":
		return fail(errors.New("no local root"))
	case opts.RemoteDir == "":
		return fail(errors.New("no remote directory"))
	case strings.IndexByte(opts.RemoteDir, 0) >= 0:
		return fail(errors.New("remote directory contains a NUL byte"))
	}

	// Read what the last push left while listing the checkout.
	type previous struct {
		paths []string
		err   error
	}
	prevc := make(chan previous, 1)
	go func() {
		paths, err := readPrevious(ctx, client, opts.RemoteDir)
		prevc <- previous{paths, err}
	}()
	files, err := FileSet(ctx, opts.Root)
	prev := <-prevc
	if err != nil {
		return fail(err)
	}
	if prev.err != nil {
		return fail(prev.err)
	}
	for _, f := range files {
		if reserved(f.Path) {
			return fail(fmt.Errorf("%q is reserved for crabbox's list of synced files", f.Path))
		}
	}
	if err := checkLimits(opts, files); err != nil {
		return fail(err)
	}

	if paths := stale(prev.paths, files); len(paths) > 0 {
		if err := runScript(ctx, client, deleteScript(opts.RemoteDir, paths)); err != nil {
			return fail(fmt.Errorf("delete %d files no longer in the checkout: %w", len(paths), err))
		}
	}
	stats, err := transfer(ctx, client, opts, files)
	stats.Duration = time.Since(start)
	if err != nil {
		return fail(err)
	}
	return stats, nil
}

// readPrevious reads the list of paths the last push synced.
func readPrevious(ctx context.Context, client *ssh.Client, remoteDir string) ([]string, error) {
	sess, err := remote.NewSession(ctx, client)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, fmt.Errorf("read %s/%s on the box: open SSH session: %w", remoteDir, syncedList, err)
	}
	defer sess.Close()
	stop := context.AfterFunc(ctx, func() { sess.Close() })
	defer stop()
	stderr := &tail{}
	sess.Stderr = stderr
	stdout, err := sess.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := sess.Start(readListCommand(remoteDir)); err != nil {
		return nil, fmt.Errorf("read %s/%s on the box: %w", remoteDir, syncedList, err)
	}
	data, readErr := io.ReadAll(io.LimitReader(stdout, maxListSize+1))
	if len(data) > maxListSize {
		return nil, fmt.Errorf("read %s/%s on the box: larger than %d bytes", remoteDir, syncedList, maxListSize)
	}
	if err := errors.Join(sess.Wait(), readErr); err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, fmt.Errorf("read %s/%s on the box: %w%s", remoteDir, syncedList, err, stderr.suffix())
	}
	paths, err := parseList(data)
	if err != nil {
		return nil, fmt.Errorf("%s/%s on the box holds an %w; remove the file to start over", remoteDir, syncedList, err)
	}
	return paths, nil
}

// runScript runs a script with sh on the box, sending it on stdin.
func runScript(ctx context.Context, client *ssh.Client, script string) error {
	sess, err := remote.NewSession(ctx, client)
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return fmt.Errorf("open SSH session: %w", err)
	}
	defer sess.Close()
	stop := context.AfterFunc(ctx, func() { sess.Close() })
	defer stop()
	stderr := &tail{}
	sess.Stderr = stderr
	sess.Stdin = strings.NewReader(script)
	if err := sess.Run("sh -s"); err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return fmt.Errorf("%w%s", err, stderr.suffix())
	}
	return nil
}

// transfer streams files as a tar archive into tar -xf - on the box.
func transfer(ctx context.Context, client *ssh.Client, opts Options, files []File) (Stats, error) {
	nonce := make([]byte, 8)
	if _, err := rand.Read(nonce); err != nil {
		return Stats{}, err
	}
	listTmp := syncedList + ".tmp-" + hex.EncodeToString(nonce)

	sess, err := remote.NewSession(ctx, client)
	if err != nil {
		if ctx.Err() != nil {
			return Stats{}, ctx.Err()
		}
		return Stats{}, fmt.Errorf("open SSH session: %w", err)
	}
	defer sess.Close()
	stop := context.AfterFunc(ctx, func() { sess.Close() })
	defer stop()
	stderr := &tail{}
	sess.Stderr = stderr
	stdin, err := sess.StdinPipe()
	if err != nil {
		return Stats{}, err
	}
	if err := sess.Start(extractCommand(opts.RemoteDir, listTmp)); err != nil {
		return Stats{}, fmt.Errorf("start tar on the box: %w", err)
	}

	stats, writeErr := writeArchive(ctx, stdin, opts, files, listTmp)
	if writeErr == nil || errors.Is(writeErr, errRemote) {
		// On a remote failure the box has the reason: let it arrive.
		stdin.Close()
	} else {
		// A local failure aborts the archive before its last entry, the
		// new list, so the box keeps the old one.
		sess.Close()
	}
	waitErr := sess.Wait()
	switch {
	case ctx.Err() != nil:
		return stats, ctx.Err()
	case writeErr != nil && !errors.Is(writeErr, errRemote):
		return stats, writeErr
	case waitErr != nil:
		return stats, fmt.Errorf("extract on the box: %w%s", waitErr, stderr.suffix())
	case writeErr != nil:
		return stats, fmt.Errorf("extract on the box: %w%s", writeErr, stderr.suffix())
	}
	return stats, nil
}

// errRemote marks a failure to write to the box, whose reason is on the
// box's side.
var errRemote = errors.New("the box stopped reading the archive")

// remoteWriter tags write errors with errRemote.
type remoteWriter struct{ w io.Writer }

func (r remoteWriter) Write(p []byte) (int, error) {
	n, err := r.w.Write(p)
	if err != nil {
		err = fmt.Errorf("%w: %w", errRemote, err)
	}
	return n, err
}

// writeArchive writes files, then the new list of synced paths, as a tar
// archive to w.
func writeArchive(ctx context.Context, w io.Writer, opts Options, files []File, listTmp string) (Stats, error) {
	bw := bufio.NewWriterSize(remoteWriter{w}, 256<<10)
	tw := tar.NewWriter(bw)
	var stats Stats
	var list strings.Builder
	for _, f := range files {
		if err := ctx.Err(); err != nil {
			return stats, err
		}
		n, ok, err := writeFile(tw, opts.Root, f)
		if err != nil {
			return stats, err
		}
		if !ok {
			continue
		}
		list.WriteString(f.Path)
		list.WriteByte(0)
		stats.Files++
		stats.Bytes += n
		if opts.Progress != nil {
			opts.Progress(stats.Files, stats.Bytes)
		}
	}
	hdr := &tar.Header{
		Typeflag: tar.TypeReg,
		Name:     listTmp,
		Mode:     0o644,
		Size:     int64(list.Len()),
		ModTime:  time.Now(),
	}
	if err := tw.WriteHeader(hdr); err != nil {
		return stats, err
	}
	if _, err := io.WriteString(tw, list.String()); err != nil {
		return stats, err
	}
	if err := tw.Close(); err != nil {
		return stats, err
	}
	return stats, bw.Flush()
}

// writeFile adds f to the archive and returns the content bytes written.
// It reports false for a file that vanished since it was listed.
func writeFile(tw *tar.Writer, root string, f File) (int64, bool, error) {
	name := filepath.Join(root, filepath.FromSlash(f.Path))
	if f.LinkTarget != "" {
		fi, err := os.Lstat(name)
		if errors.Is(err, fs.ErrNotExist) {
			return 0, false, nil
		}
		if err != nil {
			return 0, false, err
		}
		hdr := &tar.Header{
			Typeflag: tar.TypeSymlink,
			Name:     f.Path,
			Linkname: f.LinkTarget,
			Mode:     0o777,
			ModTime:  fi.ModTime(),
		}
		return 0, true, tw.WriteHeader(hdr)
	}

	// Open what was listed, and only that: a path swapped for a symlink
	// since must not make Push read outside the root.
	before, err := os.Lstat(name)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, err
	}
	if !before.Mode().IsRegular() {
		return 0, false, fmt.Errorf("%q changed from a regular file while syncing", f.Path)
	}
	file, err := os.Open(name)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, err
	}
	defer file.Close()
	fi, err := file.Stat()
	if err != nil {
		return 0, false, err
	}
	if !os.SameFile(before, fi) {
		return 0, false, fmt.Errorf("%q was replaced while syncing", f.Path)
	}
	hdr := &tar.Header{
		Typeflag: tar.TypeReg,
		Name:     f.Path,
		Mode:     int64(f.Mode.Perm()),
		Size:     fi.Size(),
		ModTime:  fi.ModTime(),
	}
	if err := tw.WriteHeader(hdr); err != nil {
		return 0, false, err
	}
	n, err := io.CopyN(tw, file, hdr.Size)
	if errors.Is(err, io.EOF) {
		return n, false, fmt.Errorf("%q shrank while syncing", f.Path)
	}
	if err != nil {
		return n, false, fmt.Errorf("send %q: %w", f.Path, err)
	}
	return n, true, nil
}

// tail keeps the end of a remote command's stderr for error messages.
type tail struct{ b []byte }

const tailSize = 2048

func (t *tail) Write(p []byte) (int, error) {
	t.b = append(t.b, p...)
	if len(t.b) > tailSize {
		t.b = append(t.b[:0], t.b[len(t.b)-tailSize:]...)
	}
	return len(p), nil
}

// suffix formats the tail for appending to an error.
func (t *tail) suffix() string {
	s := strings.TrimSpace(string(t.b))
	if s == "" {
		return ""
	}
	return ": " + s
}

// checkLimits applies the guardrails to the file set before anything moves.
func checkLimits(opts Options, files []File) error {
	limits := DefaultLimits()
	if opts.Limits != nil {
		limits = *opts.Limits
	}
	if opts.Force {
		limits.MaxFiles, limits.MaxBytes = 0, 0
	}
	warning, err := planOf(opts.Root, files).Check(limits)
	if warning != "" && opts.Warn != nil {
		opts.Warn(warning)
	}
	return err
}
