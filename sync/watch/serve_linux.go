//go:build linux

package watch

import (
	"bufio"
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	gosync "sync"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The events that mean a directory's entries may have changed.
const dirMask = unix.IN_CREATE | unix.IN_DELETE | unix.IN_MODIFY | unix.IN_ATTRIB |
	unix.IN_CLOSE_WRITE | unix.IN_MOVED_FROM | unix.IN_MOVED_TO |
	unix.IN_DELETE_SELF | unix.IN_MOVE_SELF |
	unix.IN_ONLYDIR | unix.IN_DONT_FOLLOW | unix.IN_EXCL_UNLINK

// gitNames are the entries of .git and .git/info that decide what a sync
// lists; changes to the rest of .git (objects, refs, logs) do not move
// the clock.
var gitNames = map[string]bool{
	"index": true, "config": true, "config.worktree": true, "info": true,
	"exclude": true, "sparse-checkout": true,
}

// cookiePrefix starts the names of the cookie files written into .git.
const cookiePrefix = "crabbox-watch-"

// Serve watches the git checkout at root and answers questions on ln
// until ctx ends, it is idle for opts.Idle, it is asked to stop, its
// socket is removed or replaced, or the checkout is removed or moved; it
// closes ln when it returns. It returns nil when it ended for one of
// those reasons, and an error when it could not watch (wrapping
// ErrUnsupported for checkouts it does not watch) or lost track of
// changes (the kernel's event queue overflowed).
func Serve(ctx context.Context, root string, ln net.Listener, opts ServeOptions) error {
	defer ln.Close()
	root = filepath.Clean(root)
	git := filepath.Join(root, ".git")
	if fi, err := os.Lstat(git); err != nil || !fi.IsDir() {
		return fmt.Errorf("%w %s: %s is not a directory", ErrUnsupported, root, git)
	}
	if _, err := os.Lstat(filepath.Join(root, ".gitmodules")); err == nil {
		return fmt.Errorf("%w %s: it has submodules", ErrUnsupported, root)
	}
	sock, err := socketStamp(ln)
	if err != nil {
		return err
	}
	w, err := newWatcher(root, cmp.Or(opts.MaxDirs, DefaultMaxDirs))
	if err != nil {
		return err
	}

	// The reader and the connections' goroutines end with quit, and
	// Serve returns only once they have.
	quit, stop := context.WithCancel(context.Background())
	var wg gosync.WaitGroup
	defer func() {
		stop()
		w.close()
		ln.Close()
		wg.Wait()
	}()
	events := make(chan []byte)
	readErr := make(chan error, 1)
	wg.Go(func() { readErr <- w.read(quit, events) })
	questions := make(chan question)
	wg.Go(func() { accept(quit, &wg, ln, questions) })

	idle := time.NewTimer(cmp.Or(opts.Idle, DefaultIdle))
	defer idle.Stop()
	check := time.NewTicker(cmp.Or(opts.Check, 10*time.Second))
	defer check.Stop()
	pending := map[string]question{} // by cookie name
	defer func() {
		for name, q := range pending {
			reply(q.conn, "err watcher ended")
			os.Remove(filepath.Join(git, name))
		}
	}()
	for n := 0; ; n++ {
		select {
		case <-ctx.Done():
			return nil
		case err := <-readErr:
			return err
		case <-idle.C:
			return nil
		case <-check.C:
			if now, err := socketStamp(ln); err != nil || now != sock {
				return nil
			}
		case q := <-questions:
			idle.Reset(cmp.Or(opts.Idle, DefaultIdle))
			verb, _, _ := strings.Cut(q.text, " ")
			switch {
			case q.text == "stop":
				reply(q.conn, "ok")
				return nil
			case q.text == "clock" || verb == "changes":
				name := cookiePrefix + w.id + "-" + strconv.Itoa(n)
				f, err := os.OpenFile(filepath.Join(git, name), os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
				if err != nil {
					reply(q.conn, "err "+err.Error())
					continue
				}
				f.Close()
				pending[name] = q
			default:
				reply(q.conn, fmt.Sprintf("err unknown question %q", q.text))
			}
		case buf := <-events:
			cookies, err := w.handle(buf)
			if err != nil {
				return err
			}
			for _, name := range cookies {
				if q, ok := pending[name]; ok {
					os.Remove(filepath.Join(git, name))
					delete(pending, name)
					reply(q.conn, w.answer(q.text))
				}
			}
		}
		if w.gone {
			return nil
		}
	}
}

type question struct {
	conn net.Conn
	text string
}

// accept reads one question from each connection until ln is closed.
func accept(quit context.Context, wg *gosync.WaitGroup, ln net.Listener, questions chan<- question) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		wg.Go(func() {
			defer context.AfterFunc(quit, func() { c.Close() })()
			c.SetDeadline(time.Now().Add(5 * time.Second))
			line, err := bufio.NewReader(c).ReadString('\n')
			if err != nil {
				c.Close()
				return
			}
			select {
			case questions <- question{c, strings.TrimSpace(line)}:
			case <-quit.Done():
				c.Close()
			}
		})
	}
}

// reply answers and closes a question's connection.
func reply(c net.Conn, answer string) {
	c.Write([]byte(answer + "\n"))
	c.Close()
}

// socketStamp identifies the file of a Unix socket listener.
func socketStamp(ln net.Listener) (uint64, error) {
	var st unix.Stat_t
	if err := unix.Stat(ln.Addr().String(), &st); err != nil {
		return 0, fmt.Errorf("watch: socket %s: %w", ln.Addr(), err)
	}
	return st.Ino, nil
}

// watcher is the inotify state of one checkout.
type watcher struct {
	root, git string
	file      *os.File // the inotify instance
	fd        int
	id        string
	gen       uint64
	maxDirs   int
	dirs      map[int32]string // the checkout's directories by watch
	gitWatch  map[int32]bool   // .git and .git/info
	gitWD     int32            // .git's
	gone      bool             // the checkout was removed or moved

	// The journal: changed holds, for each path (relative to root,
	// slash-separated) an event named since generation floor, the
	// generation of its last event. Every change after floor that is
	// not in changed was one the journal cannot name (a directory made,
	// removed or moved, a file of .git): no answer reaches back past it.
	changed map[string]uint64
	floor   uint64
}

// maxJournal bounds the paths the journal keeps; past it, the journal
// starts over (answers reaching back further say "everything").
const maxJournal = 10_000

// MaxChanges bounds the paths of an answer to "changes": more, and the
// answer is that everything may have changed.
const MaxChanges = 2_000

// token is the clock's current token.
func (w *watcher) token() string { return w.id + ":" + strconv.FormatUint(w.gen, 10) }

// noted records an event of the file at rel; rel "" is an event the
// journal cannot name.
func (w *watcher) noted(rel string) {
	w.gen++
	if rel == "" || len(w.changed) >= maxJournal {
		w.changed, w.floor = nil, w.gen
		return
	}
	if w.changed == nil {
		w.changed = map[string]uint64{}
	}
	w.changed[rel] = w.gen
}

// answer answers "clock" with the token, and "changes SINCE" with the
// token and the quoted paths changed since token SINCE, or "*" when the
// journal cannot tell (another watcher's token, one older than the
// journal, too many paths).
func (w *watcher) answer(question string) string {
	tok := w.token()
	since, ok := strings.CutPrefix(question, "changes ")
	if !ok {
		return "ok " + tok
	}
	id, genText, _ := strings.Cut(since, ":")
	gen, err := strconv.ParseUint(genText, 10, 64)
	if err != nil || id != w.id || gen < w.floor || gen > w.gen {
		return "ok " + tok + " *"
	}
	var paths []string
	for p, g := range w.changed {
		if g > gen {
			paths = append(paths, p)
		}
	}
	if len(paths) > MaxChanges {
		return "ok " + tok + " *"
	}
	slices.Sort(paths)
	var b strings.Builder
	b.WriteString("ok " + tok)
	for _, p := range paths {
		b.WriteByte(' ')
		b.WriteString(strconv.Quote(p))
	}
	return b.String()
}

func newWatcher(root string, maxDirs int) (*watcher, error) {
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	if err != nil {
		return nil, fmt.Errorf("watch %s: inotify: %w", root, err)
	}
	id := make([]byte, 8)
	rand.Read(id)
	w := &watcher{
		root: root, git: filepath.Join(root, ".git"), file: os.NewFile(uintptr(fd), "inotify"), fd: fd,
		id: hex.EncodeToString(id), maxDirs: maxDirs, dirs: map[int32]string{}, gitWatch: map[int32]bool{},
	}
	for _, dir := range []string{w.git, filepath.Join(w.git, "info")} {
		if err := w.watchGit(dir); err != nil {
			w.close()
			return nil, err
		}
	}
	if err := w.addTree(root); err != nil {
		w.close()
		return nil, err
	}
	return w, nil
}

func (w *watcher) close() { w.file.Close() }

// relative is name relative to the root, slash-separated.
func (w *watcher) relative(name string) string {
	rel, err := filepath.Rel(w.root, name)
	if err != nil || rel == "." || rel == ".." || strings.HasPrefix(rel, "../") {
		return ""
	}
	return filepath.ToSlash(rel)
}

// watchGit watches dir (.git or .git/info) for the entries in gitNames; a
// missing .git/info is watched once it is made.
func (w *watcher) watchGit(dir string) error {
	wd, err := unix.InotifyAddWatch(w.fd, dir, dirMask)
	switch {
	case errors.Is(err, unix.ENOENT) && dir != w.git:
		return nil
	case err != nil:
		return fmt.Errorf("watch %s: %w", dir, err)
	}
	w.gitWatch[int32(wd)] = true
	if dir == w.git {
		w.gitWD = int32(wd)
	}
	return nil
}

// addTree watches dir and every directory below it but .git.
func (w *watcher) addTree(dir string) error {
	return filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		switch {
		case err != nil && p != dir && errors.Is(err, fs.ErrNotExist):
			return nil // removed while walked: its parent's event moved the clock
		case err != nil:
			return fmt.Errorf("watch %s: %w", p, err)
		case !d.IsDir():
			return nil
		case p == w.git:
			return filepath.SkipDir
		}
		wd, err := unix.InotifyAddWatch(w.fd, p, dirMask)
		if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR) {
			return filepath.SkipDir
		}
		if errors.Is(err, unix.ENOSPC) {
			return fmt.Errorf("watch %s: the user's inotify watches are used up (fs.inotify.max_user_watches)", w.root)
		}
		if err != nil {
			return fmt.Errorf("watch %s: %w", p, err)
		}
		w.dirs[int32(wd)] = p
		if len(w.dirs) > w.maxDirs {
			return fmt.Errorf("%w %s: more than %d directories", ErrUnsupported, w.root, w.maxDirs)
		}
		return nil
	})
}

// dropTree stops watching dir and the directories below it (moved out or
// removed).
func (w *watcher) dropTree(dir string) {
	for wd, p := range w.dirs {
		if p == dir || strings.HasPrefix(p, dir+"/") {
			unix.InotifyRmWatch(w.fd, uint32(wd))
			delete(w.dirs, wd)
		}
	}
}

// read sends each buffer of events it reads until the instance is
// closed or quit ends.
func (w *watcher) read(quit context.Context, events chan<- []byte) error {
	for {
		buf := make([]byte, 64<<10)
		n, err := w.file.Read(buf)
		if err != nil {
			if errors.Is(err, os.ErrClosed) {
				return nil
			}
			return fmt.Errorf("watch %s: read events: %w", w.root, err)
		}
		select {
		case events <- buf[:n]:
		case <-quit.Done():
			return nil
		}
	}
}

// handle applies a buffer of events and returns the names of the cookies
// among them.
func (w *watcher) handle(buf []byte) (cookies []string, err error) {
	for off := 0; off+unix.SizeofInotifyEvent <= len(buf); {
		ev := (*unix.InotifyEvent)(unsafe.Pointer(&buf[off]))
		nameBytes := buf[off+unix.SizeofInotifyEvent : off+unix.SizeofInotifyEvent+int(ev.Len)]
		off += unix.SizeofInotifyEvent + int(ev.Len)
		name := strings.TrimRight(string(nameBytes), "\x00")
		if ev.Mask&unix.IN_Q_OVERFLOW != 0 {
			return nil, fmt.Errorf("watch %s: the kernel's event queue overflowed", w.root)
		}
		if w.gitWatch[ev.Wd] {
			if err := w.gitEvent(ev.Wd, ev.Mask, name, &cookies); err != nil {
				return nil, err
			}
			continue
		}
		dir, ok := w.dirs[ev.Wd]
		if !ok {
			continue // a watch already dropped
		}
		// Events of a file name it; those of directories (made,
		// removed, moved, the watched one's own) the journal does not
		// follow.
		rel := ""
		if name != "" && ev.Mask&(unix.IN_ISDIR|unix.IN_IGNORED|unix.IN_DELETE_SELF|unix.IN_MOVE_SELF|unix.IN_UNMOUNT) == 0 {
			rel = w.relative(filepath.Join(dir, name))
		}
		w.noted(rel)
		switch {
		case ev.Mask&unix.IN_IGNORED != 0:
			delete(w.dirs, ev.Wd)
		case ev.Mask&(unix.IN_DELETE_SELF|unix.IN_MOVE_SELF|unix.IN_UNMOUNT) != 0 && dir == w.root:
			w.gone = true
		case ev.Mask&unix.IN_ISDIR == 0:
		case ev.Mask&(unix.IN_CREATE|unix.IN_MOVED_TO) != 0:
			if err := w.addTree(filepath.Join(dir, name)); err != nil {
				return nil, err
			}
		case ev.Mask&(unix.IN_DELETE|unix.IN_MOVED_FROM) != 0:
			w.dropTree(filepath.Join(dir, name))
		}
	}
	return cookies, nil
}

// gitEvent applies an event of .git or .git/info.
func (w *watcher) gitEvent(wd int32, mask uint32, name string, cookies *[]string) error {
	switch {
	case mask&unix.IN_IGNORED != 0:
		delete(w.gitWatch, wd)
		if wd == w.gitWD {
			w.gone = true // .git is gone: no longer a checkout to watch
		}
	case mask&(unix.IN_DELETE_SELF|unix.IN_MOVE_SELF) != 0:
		w.noted("") // .git or .git/info removed: watched again if .git stays
	case strings.HasPrefix(name, cookiePrefix):
		if mask&unix.IN_CREATE != 0 {
			*cookies = append(*cookies, name)
		}
	case gitNames[name]:
		w.noted("")
		if name == "info" && mask&unix.IN_ISDIR != 0 && mask&(unix.IN_CREATE|unix.IN_MOVED_TO) != 0 {
			return w.watchGit(filepath.Join(w.git, "info"))
		}
	}
	return nil
}
