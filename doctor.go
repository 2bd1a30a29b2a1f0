package crabbox

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"

	"github.com/crabbox-dev/crabbox/internal/diskspace"
	"github.com/crabbox-dev/crabbox/internal/remote"
	"github.com/crabbox-dev/crabbox/internal/units"
	"github.com/crabbox-dev/crabbox/provider"
)

// DoctorOptions shape the doctor's checks.
type DoctorOptions struct {
	// Provider is the provider to check; empty means the client's.
	Provider string
	// Lease, when set, is the ID or slug of a lease whose box is checked
	// too: the free space of its work root's filesystem (df over SSH).
	Lease string
}

// Doctor runs cheap checks that change nothing (beyond a temporary file in
// the state directory): the state directory is writable, with room to
// spare, no lease claim is damaged (each damaged one is a failed check
// saying what to do), git is installed, the provider configures, and the
// provider's own checks if it has any; with opts.Lease, the free space on
// that lease's box. A failed check is a result, not an error.
func (c *Client) Doctor(ctx context.Context, opts DoctorOptions) []provider.Check {
	if err := c.ready(ctx, "doctor"); err != nil {
		return []provider.Check{{Name: "crabbox client", Detail: err.Error()}}
	}
	name := opts.Provider
	if name == "" {
		name = c.provider
	}
	checks := c.checkStateDir()
	checks = append(checks, c.checkClaims(name)...)
	checks = append(checks, checkGit())
	b, err := c.Backend(name)
	if err != nil {
		checks = append(checks, provider.Check{Name: "provider " + name, Detail: err.Error()})
		return append(checks, c.checkBoxSpace(ctx, opts.Lease)...)
	}
	spec := b.Spec()
	checks = append(checks, provider.Check{Name: "provider " + name, OK: true, Detail: fmt.Sprintf("%s (%s) configures", spec.Name, spec.Kind)})
	if db, ok := b.(provider.DoctorBackend); ok {
		pc, err := db.Doctor(ctx)
		if err != nil {
			checks = append(checks, provider.Check{Name: spec.Name + " checks", Detail: err.Error()})
		}
		for _, ch := range pc {
			checks = append(checks, provider.Check{Name: spec.Name + ": " + ch.Name, OK: ch.OK, Warn: ch.Warn, Detail: ch.Detail})
		}
	}
	return append(checks, c.checkBoxSpace(ctx, opts.Lease)...)
}

// stateProbeSize is how much the state directory check writes: enough that
// a full disk refuses it, where creating an empty file still succeeds.
const stateProbeSize = 64 << 10

// checkStateDir writes and removes a test file in the state directory, and
// reports its filesystem's free space.
func (c *Client) checkStateDir() []provider.Check {
	return stateDirChecks(c.store.Dir(), writeProbe, diskspace.Free)
}

// stateDirChecks are the state directory's checks, with write and free
// doing the writing and measuring.
func stateDirChecks(dir string, write func(dir string) error, free func(dir string) (diskspace.Space, error)) []provider.Check {
	ch := provider.Check{Name: "state directory"}
	switch err := write(dir); {
	case diskspace.IsFull(err):
		ch.Detail = fmt.Sprintf("%s: disk full, a test file of %s could not be written: %v", dir, units.Bytes(int64(stateProbeSize)), err)
	case err != nil:
		ch.Detail = fmt.Sprintf("%s is not writable: %v", dir, err)
	default:
		ch.OK, ch.Detail = true, dir+" is writable"
	}
	space := provider.Check{Name: "state directory space"}
	s, err := free(dir)
	if err != nil {
		space.OK, space.Warn, space.Detail = true, true, fmt.Sprintf("cannot tell: %v", err)
		return []provider.Check{ch, space}
	}
	return []provider.Check{ch, spaceCheck(space, dir, s)}
}

// writeProbe writes stateProbeSize bytes to a new file in dir, flushes
// them to the disk, and removes the file.
func writeProbe(dir string) (err error) {
	f, err := os.CreateTemp(dir, ".doctor-*")
	if err != nil {
		return err
	}
	defer func() {
		if rmErr := os.Remove(f.Name()); rmErr != nil && err == nil {
			err = fmt.Errorf("remove test file: %w", rmErr)
		}
	}()
	_, err = f.Write(make([]byte, stateProbeSize))
	if err == nil {
		err = f.Sync()
	}
	return errors.Join(err, f.Close())
}

// spaceCheck fills ch with the free space s of the filesystem holding dir:
// failed when nothing is left, a warning when it is low.
func spaceCheck(ch provider.Check, dir string, s diskspace.Space) provider.Check {
	ch.Detail = fmt.Sprintf("%s free of %s at %s", units.Bytes(int64(s.Avail)), units.Bytes(int64(s.Total)), dir)
	switch {
	case s.Avail == 0:
		ch.Detail = "disk full: " + ch.Detail
	case s.Low():
		ch.OK, ch.Warn = true, true
		ch.Detail += fmt.Sprintf(" (under %s or %d%%): syncs and runs may fail with a full disk",
			units.Bytes(int64(diskspace.LowBytes)), diskspace.LowPercent)
	default:
		ch.OK = true
	}
	return ch
}

// checkBoxSpace reports the free space of the work root of the lease ref's
// box, measured with df over the lease's SSH connection; none without ref.
func (c *Client) checkBoxSpace(ctx context.Context, ref string) []provider.Check {
	if ref == "" {
		return nil
	}
	ch := provider.Check{Name: "box space " + ref}
	l, err := c.Resolve(ctx, ref)
	if err != nil {
		ch.Detail = err.Error()
		return []provider.Check{ch}
	}
	defer l.Close()
	ch.Name = "box space " + l.ID()
	root := l.Target().WorkRoot
	if root == "" {
		ch.OK, ch.Warn, ch.Detail = true, true, "cannot tell: the lease names no work root"
		return []provider.Check{ch}
	}
	conn, err := l.SSH(ctx)
	if err != nil {
		ch.OK, ch.Warn, ch.Detail = true, true, fmt.Sprintf("cannot tell: %v", err)
		return []provider.Check{ch}
	}
	sess, err := remote.NewSession(ctx, conn)
	if err != nil {
		ch.Detail = fmt.Sprintf("open a session on %s: %v", l.ID(), err)
		return []provider.Check{ch}
	}
	defer sess.Close()
	stop := context.AfterFunc(ctx, func() { sess.Close() })
	defer stop()
	var stdout, stderr capped
	sess.Stdout, sess.Stderr = &stdout, &stderr
	if err := sess.Run("df -Pk -- " + remote.Quote(root)); err != nil {
		ch.Detail = fmt.Sprintf("df -Pk %s on %s: %v: %s", root, l.ID(), err, strings.TrimSpace(stderr.String()))
		return []provider.Check{ch}
	}
	s, err := parseDF(stdout.String())
	if err != nil {
		ch.Detail = fmt.Sprintf("df -Pk %s on %s: %v", root, l.ID(), err)
		return []provider.Check{ch}
	}
	return []provider.Check{spaceCheck(ch, root, s)}
}

// capped is a buffer that keeps the first 64 KiB written to it.
type capped struct{ bytes.Buffer }

func (c *capped) Write(p []byte) (int, error) {
	if room := 64<<10 - c.Len(); room > 0 {
		c.Buffer.Write(p[:min(len(p), room)])
	}
	return len(p), nil
}

// dfLine is a data line of `df -Pk`: the filesystem (which may hold
// spaces), 1024-blocks, used, available, capacity and the mount point
// (which may hold spaces too). It is compiled on first use, not at every
// start of every program that links crabbox.
var dfLine = sync.OnceValue(func() *regexp.Regexp {
	return regexp.MustCompile(`^(.*\S)\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+%|-)\s+(/.*)$`)
})

// parseDF reads the output of `df -Pk DIR` (POSIX format: a header, then
// one line for DIR's filesystem) into its free space. The output comes
// from the box, so anything else is an error.
func parseDF(out string) (diskspace.Space, error) {
	lines := strings.Split(strings.TrimRight(strings.ReplaceAll(out, "\r\n", "\n"), "\n"), "\n")
	if len(lines) < 2 || !strings.HasPrefix(strings.TrimSpace(lines[0]), "Filesystem") {
		return diskspace.Space{}, fmt.Errorf("unexpected output %s", quoteOutput(out))
	}
	m := dfLine().FindStringSubmatch(lines[len(lines)-1])
	if m == nil {
		return diskspace.Space{}, fmt.Errorf("unexpected output %s", quoteOutput(out))
	}
	total, err1 := strconv.ParseUint(m[2], 10, 64)
	avail, err2 := strconv.ParseUint(m[4], 10, 64)
	if err := errors.Join(err1, err2); err != nil || total > 1<<53 || avail > 1<<53 {
		return diskspace.Space{}, fmt.Errorf("unexpected sizes in %s", quoteOutput(out))
	}
	return diskspace.Space{Avail: avail * 1024, Total: total * 1024}, nil
}

// quoteOutput quotes outside output for an error, at most 200 bytes of
// the quote.
func quoteOutput(s string) string {
	q := strconv.Quote(s)
	if len(q) > 200 {
		q = q[:200] + "..."
	}
	return q
}

// checkClaims reports the lease store's damaged claims, one failed check
// each; the lease of one is released by Stop at the provider that made it.
func (c *Client) checkClaims(name string) []provider.Check {
	damaged, err := c.store.Damaged()
	if err != nil {
		return []provider.Check{{Name: "lease claims", Detail: err.Error()}}
	}
	if len(damaged) == 0 {
		return []provider.Check{{Name: "lease claims", OK: true, Detail: "none damaged"}}
	}
	var out []provider.Check
	for _, d := range damaged {
		out = append(out, provider.Check{Name: "lease claim " + d.ID, Detail: fmt.Sprintf(
			"damaged (%v), kept as %s; its box is still yours: `crabbox stop %s` releases it and drops the file "+
				"(add --provider P unless provider %q made it); if no provider has it any more, remove the file",
			d.Err, d.Path, d.ID, name)})
	}
	return out
}

func checkGit() provider.Check {
	path, err := exec.LookPath("git")
	if err != nil {
		return provider.Check{Name: "git", Detail: "git not found on PATH: crabbox needs it to list the checkout"}
	}
	return provider.Check{Name: "git", OK: true, Detail: path}
}
