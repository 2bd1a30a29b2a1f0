// Package watch keeps a change clock for a git checkout, so that a sync
// of a checkout nobody touched costs neither a git listing nor a stat per
// file.
//
// A watcher (Serve, a long-lived process of its own) watches every
// directory of the checkout and the few files of its .git directory that
// decide what a sync lists (the index, the config, info/exclude). Its
// clock is a token that changes whenever any of them may have changed.
// A caller asks for the clock (Client.Clock) before it lists the
// checkout and keeps the token with what it learned from the listing (a
// fingerprint, say); when a later ask returns the same token, nothing
// changed since, and what it learned still holds.
//
// An answer is exact, not eventual: before it answers, the watcher writes
// a cookie file into .git and waits until the kernel tells it of that
// file, so every change made before the question was asked has been seen.
//
// The clock is coarse on purpose: any change anywhere in the checkout,
// ignored files included, moves it; at worst a caller lists the checkout
// as it would without a watcher. The watcher also keeps a journal of the
// files events named (Client.Changes), so a caller that kept a listing
// can look again at just those; a directory made, removed or moved, a
// change of .git's files, or too many files, and it says "everything". What inotify does not report cannot move
// it: a file written through a hard link from outside the checkout, or
// through a shared memory mapping, looks unchanged until something else
// changes (Options.Checksum and FullResync of package sync always list).
//
// Watching needs Linux's inotify; elsewhere Serve returns
// ErrUnsupported and callers keep listing. Checkouts whose .git is not a
// directory (worktrees) and checkouts with submodules are not watched
// either.
package watch

import (
	"bufio"
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/gofrs/flock"

	"github.com/crabbox-dev/crabbox/internal/atomicfile"
)

// ErrUnsupported is returned by Serve for a checkout or a platform it
// cannot watch.
var ErrUnsupported = errors.New("cannot watch")

// ErrNoWatcher is returned by Client.Clock when no watcher answers on the
// socket.
var ErrNoWatcher = errors.New("no watcher")

// ServeOptions adjust Serve.
type ServeOptions struct {
	// Idle ends Serve after this long without a question; zero means
	// DefaultIdle.
	Idle time.Duration
	// MaxDirs bounds the directories watched (each costs one of the
	// user's inotify watches); zero means DefaultMaxDirs. A checkout with
	// more is not watched.
	MaxDirs int
	// Check is how often Serve makes sure its socket is still its own
	// (a removed or replaced socket ends it); zero means 10 seconds.
	Check time.Duration
	// Listening, if set, is called by ListenAndServe once this watcher
	// holds the checkout and listens on its socket, before it walks the
	// checkout: a question asked from then on waits for the walk and is
	// answered, and no other watcher of the checkout starts.
	Listening func()
}

const (
	// DefaultIdle is how long a watcher lives without a question.
	DefaultIdle = 30 * time.Minute
	// DefaultMaxDirs is the default bound of watched directories.
	DefaultMaxDirs = 100_000
)

// SocketPath is where the watcher of root listens: a name under dir
// derived from root, short enough for a Unix socket's address.
func SocketPath(dir, root string) string {
	sum := sha256.Sum256([]byte(filepath.Clean(root)))
	return filepath.Join(dir, hex.EncodeToString(sum[:8])+".sock")
}

// Client asks the watcher listening on Socket.
type Client struct {
	Socket string
	// Timeout bounds one question; zero means 2 seconds.
	Timeout time.Duration
}

// Clock returns the watcher's current token. An error for which
// errors.Is(err, ErrNoWatcher) holds means nobody listens on the socket.
func (c Client) Clock(ctx context.Context) (string, error) {
	reply, err := c.ask(ctx, "clock")
	if err != nil {
		return "", err
	}
	if reply == "" || strings.ContainsAny(reply, " \t") {
		return "", fmt.Errorf("watcher on %s: malformed clock %q", c.Socket, reply)
	}
	return reply, nil
}

// Changes returns the watcher's current token and the paths (relative
// to the checkout, slash-separated, sorted) of the files that may have
// changed since the token since. All is true when the watcher cannot name
// them: since is another watcher's token or older than what it keeps,
// too many files changed, or a directory or a file of .git that decides
// the listing changed. Paths name only regular files' and symlinks'
// events; a path may name a file that is gone again or ignored.
func (c Client) Changes(ctx context.Context, since string) (token string, paths []string, all bool, err error) {
	if since == "" || strings.ContainsAny(since, " \t\n") {
		return "", nil, false, fmt.Errorf("watcher on %s: malformed token %q", c.Socket, since)
	}
	reply, err := c.ask(ctx, "changes "+since)
	var refused answerError
	if errors.As(err, &refused) && strings.HasPrefix(refused.msg, "unknown question") {
		// A watcher started by an earlier crabbox: its clock still
		// counts, it just cannot name what changed.
		token, err := c.Clock(ctx)
		return token, nil, true, err
	}
	if err != nil {
		return "", nil, false, err
	}
	token, rest, _ := strings.Cut(reply, " ")
	if token == "" {
		return "", nil, false, fmt.Errorf("watcher on %s: malformed changes %q", c.Socket, reply)
	}
	if rest == "*" {
		return token, nil, true, nil
	}
	for rest != "" {
		q, err := strconv.QuotedPrefix(rest)
		if err != nil {
			return "", nil, false, fmt.Errorf("watcher on %s: malformed changes: %w", c.Socket, err)
		}
		p, _ := strconv.Unquote(q)
		paths = append(paths, p)
		rest = strings.TrimPrefix(rest[len(q):], " ")
	}
	return token, paths, false, nil
}

// Stop asks the watcher to end.
func (c Client) Stop(ctx context.Context) error {
	_, err := c.ask(ctx, "stop")
	return err
}

// ask sends one question and reads the one-line answer: "ok REPLY" or
// "err MESSAGE".
func (c Client) ask(ctx context.Context, question string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, cmp.Or(c.Timeout, 2*time.Second))
	defer cancel()
	var d net.Dialer
	conn, err := d.DialContext(ctx, "unix", c.Socket)
	if err != nil {
		return "", fmt.Errorf("%w on %s: %w", ErrNoWatcher, c.Socket, err)
	}
	defer conn.Close()
	if dl, ok := ctx.Deadline(); ok {
		conn.SetDeadline(dl)
	}
	if _, err := conn.Write([]byte(question + "\n")); err != nil {
		return "", fmt.Errorf("watcher on %s: %w", c.Socket, err)
	}
	line, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil {
		return "", fmt.Errorf("watcher on %s: no answer: %w", c.Socket, err)
	}
	status, reply, _ := strings.Cut(strings.TrimSuffix(line, "\n"), " ")
	switch status {
	case "ok":
		return reply, nil
	case "err":
		return "", answerError{socket: c.Socket, msg: reply}
	}
	return "", fmt.Errorf("watcher on %s: malformed answer %q", c.Socket, line)
}

// answerError is a watcher's answer "err MESSAGE".
type answerError struct{ socket, msg string }

func (e answerError) Error() string { return "watcher on " + e.socket + ": " + e.msg }

// Supported reports whether Serve can watch checkouts on this platform.
func Supported() bool { return runtime.GOOS == "linux" }

// refusedSuffix names the file, next to a socket, in which ListenAndServe
// notes why it does not watch a checkout.
const refusedSuffix = ".refused"

// RetryRefused is how long a checkout that could not be watched is not
// tried again.
const RetryRefused = time.Hour

// Refused reports why the watcher of socket's checkout refused to watch
// it within RetryRefused of now, or "" when a watcher may be started.
func Refused(socket string, now time.Time) string {
	fi, err := os.Stat(socket + refusedSuffix)
	if err != nil || now.Sub(fi.ModTime()) > RetryRefused {
		return ""
	}
	data, err := os.ReadFile(socket + refusedSuffix)
	if err != nil || len(data) == 0 {
		return "unknown reason"
	}
	return string(data)
}

// ListenAndServe serves the checkout at root on the Unix socket (see
// Serve), unless another watcher already serves it there: a lock next to
// the socket decides, and a stale socket left by a watcher that died is
// replaced. When the checkout cannot be watched (ErrUnsupported), the
// reason is noted for Refused and the error returned.
func ListenAndServe(ctx context.Context, root, socket string, opts ServeOptions) error {
	if err := os.MkdirAll(filepath.Dir(socket), 0o700); err != nil {
		return fmt.Errorf("watch %s: %w", root, err)
	}
	lock := flock.New(socket + ".lock")
	locked, err := lock.TryLock()
	if err != nil {
		return fmt.Errorf("watch %s: lock: %w", root, err)
	}
	if !locked {
		return nil // another watcher serves it
	}
	defer lock.Unlock()
	if err := os.Remove(socket); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("watch %s: remove stale socket: %w", root, err)
	}
	ln, err := net.Listen("unix", socket)
	if err != nil {
		return fmt.Errorf("watch %s: %w", root, err)
	}
	if opts.Listening != nil {
		opts.Listening()
	}
	err = Serve(ctx, root, ln, opts)
	os.Remove(socket)
	if errors.Is(err, ErrUnsupported) {
		atomicfile.WriteCache(socket+refusedSuffix, []byte(err.Error()))
	}
	return err
}
