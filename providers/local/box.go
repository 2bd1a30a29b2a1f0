package local

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/jonboulle/clockwork"
	"golang.org/x/crypto/ssh"

	"github.com/crabbox-dev/crabbox/internal/sshserver"
)

// serveOptions are what differs between a box served in-process and one
// served by an agent process.
type serveOptions struct {
	clock clockwork.Clock
	log   *slog.Logger
	// pid is recorded as the serving process; 0 when serving in-process.
	pid int
	// ready is called once the box serves, with its port. An error stops
	// the box before it is announced.
	ready func(port int) error
	// touched tells an in-process box that Touch moved its expiry; nil for
	// agents, which find the new expiry when their timer fires.
	touched <-chan struct{}
	// listen is the address to serve on; empty means a free loopback port.
	listen string
}

// serve runs the box of the lease directory dir: it loads the record,
// serves SSH on a loopback port, records the port, and waits until the
// lease's expiry passes (as re-read from the record, which Touch may have
// moved), the lease directory disappears, or ctx ends (release, Close,
// SIGTERM).
//
// Until the box is ready serve returns errors and leaves dir alone. Once it
// is ready it always ends the same way: it closes the server, which
// terminates every running command, and removes dir.
func serve(ctx context.Context, dir string, o serveOptions) error {
	rec, err := readRecord(dir)
	if err != nil {
		return fmt.Errorf("read lease record: %w", err)
	}
	id := rec.ID
	log := o.log.With("lease", id)
	srv, err := newServer(dir, rec, log)
	if err != nil {
		return fmt.Errorf("lease %s: %w", id, err)
	}
	addr := o.listen
	if addr == "" {
		addr = net.JoinHostPort(loopback, "0")
	}
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("lease %s: listen: %w", id, err)
	}
	served := make(chan struct{})
	var serveErr error
	go func() {
		defer close(served)
		serveErr = srv.Serve(l)
	}()
	stop := func() error {
		err := srv.Close()
		<-served
		return errors.Join(err, serveErr)
	}

	port := l.Addr().(*net.TCPAddr).Port
	// proc.json first: from now on a release finds the box by it even
	// should the record go bad.
	server := proc{PID: o.pid, Port: port, Agent: o.pid != 0}
	if server.PID == 0 {
		server.PID = os.Getpid()
	}
	err = writeProc(dir, server)
	if err == nil {
		rec, err = updateRecord(dir, func(r *record) { r.Port, r.PID = port, o.pid })
	}
	if err == nil {
		err = o.ready(port)
	}
	if err != nil {
		return errors.Join(fmt.Errorf("lease %s: announce port %d: %w", id, port, err), stop())
	}
	log.Info("local box serving", "port", port, "expires", rec.ExpiresAt)

	reason := awaitEnd(ctx, dir, rec.ExpiresAt, served, o)
	log.Info("local box stopping", "reason", reason)
	err = stop()
	if rmErr := removeTree(dir); rmErr != nil {
		err = errors.Join(err, fmt.Errorf("remove lease directory: %w", rmErr))
	}
	if err != nil {
		return fmt.Errorf("lease %s: stop box: %w", id, err)
	}
	return nil
}

// newServer makes the SSH server of the lease in dir: its own host key,
// the lease key as the only authorized key, commands in the work root.
// Keys handed over with sshserver.SetKeyRequest or SetKeysRequest (a
// ready pool's box going to its owner, the owner adding its coordinator's
// access key) are written to the record before the server accepts them,
// so that an agent serving the directory again accepts them too.
func newServer(dir string, rec record, log *slog.Logger) (*sshserver.Server, error) {
	hostKey, err := loadHostKey(dir)
	if err != nil {
		return nil, fmt.Errorf("load host key: %w", err)
	}
	authorized, err := parsePublicKey(rec.AuthorizedKey)
	if err != nil {
		return nil, fmt.Errorf("parse lease key: %w", err)
	}
	also := make([]ssh.PublicKey, len(rec.AlsoAuthorized))
	for i, line := range rec.AlsoAuthorized {
		if also[i], err = parsePublicKey(line); err != nil {
			return nil, fmt.Errorf("parse authorized key %d: %w", i+2, err)
		}
	}
	return sshserver.New(sshserver.Config{
		HostKey:        hostKey,
		AuthorizedKey:  authorized,
		AlsoAuthorized: also,
		User:           rec.User,
		Dir:            filepath.Join(dir, workDir),
		Env:            boxEnv(os.Environ()),
		Logger:         log,
		// crabbox forward, and the coordinator's port previews.
		ForwardTCP: true,
		OnSetKey: func(keys []ssh.PublicKey) error {
			lines := make([]string, len(keys))
			for i, k := range keys {
				lines[i] = formatPublicKey(k)
			}
			_, err := updateRecord(dir, func(r *record) { r.AuthorizedKey, r.AlsoAuthorized = lines[0], lines[1:] })
			if err != nil {
				return fmt.Errorf("record the new keys: %w", err)
			}
			return nil
		},
	})
}

// boxEnv is the environment commands on a local box start with: the basics
// of a login, never the serving process's own variables (which may hold
// tokens). What a run forwards on purpose comes on top, from the run itself.
func boxEnv(environ []string) []string {
	keep := map[string]bool{
		"HOME": true, "USER": true, "LOGNAME": true, "PATH": true, "SHELL": true,
		"LANG": true, "LC_ALL": true, "TZ": true, "TMPDIR": true,
		// A desktop box's display (the docker desktop image sets it).
		"DISPLAY": true,
	}
	var env []string
	for _, kv := range environ {
		if name, _, ok := strings.Cut(kv, "="); ok && keep[name] {
			env = append(env, kv)
		}
	}
	return env
}

// leaseDirPoll is how often a serving box checks that its lease directory
// is still there: a box whose directory was removed (by hand, by a cleaner,
// by another process's cleanup) stops within this long instead of serving
// a work root that is gone until its expiry.
const leaseDirPoll = 5 * time.Second

// awaitEnd waits until the box should stop and says why. Whenever its timer
// fires (at the expiry, or every leaseDirPoll) or Touch pokes it, it
// re-reads the record: a missing lease directory or record stops the box, an
// expiry moved later re-arms the timer.
func awaitEnd(ctx context.Context, dir string, expires time.Time, served <-chan struct{}, o serveOptions) string {
	next := func(expires time.Time) time.Duration { return min(o.clock.Until(expires), leaseDirPoll) }
	timer := o.clock.NewTimer(next(expires))
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return "stopped"
		case <-served:
			return "server stopped serving"
		case <-timer.Chan():
		case <-o.touched:
		}
		rec, err := readRecord(dir)
		if err != nil {
			// Only a record that cannot be read costs a look at the
			// directory, to say why.
			if _, serr := os.Stat(dir); errors.Is(serr, os.ErrNotExist) {
				return "lease directory " + dir + " is gone"
			}
			return fmt.Sprintf("lease record unreadable: %v", err)
		}
		if !rec.ExpiresAt.After(o.clock.Now()) {
			return "expired at " + rec.ExpiresAt.Format(time.RFC3339)
		}
		timer.Reset(next(rec.ExpiresAt))
	}
}
