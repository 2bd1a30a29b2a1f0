package crabbox_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/crabbox-dev/crabbox"
	"github.com/crabbox-dev/crabbox/run"
)

// call runs op, turning a panic into a failure of t (and an error).
func call(t *testing.T, name string, op func() error) (err error) {
	t.Helper()
	defer func() {
		if p := recover(); p != nil {
			t.Errorf("%s panicked: %v", name, p)
			err = fmt.Errorf("%s panicked: %v", name, p)
		}
	}()
	return op()
}

// leaseOps are the methods of a lease handle that use the box, each
// called with ctx.
func leaseOps(t *testing.T) map[string]func(context.Context, *crabbox.Lease) error {
	repo := gitRepo(t)
	return map[string]func(context.Context, *crabbox.Lease) error{
		"Sync": func(ctx context.Context, l *crabbox.Lease) error {
			_, err := l.Sync(ctx, repo, crabbox.SyncOptions{})
			return err
		},
		"Run": func(ctx context.Context, l *crabbox.Lease) error {
			_, err := l.Run(ctx, crabbox.RunRequest{Root: repo, Command: []string{"true"}})
			return err
		},
		"Run NoSync": func(ctx context.Context, l *crabbox.Lease) error {
			_, err := l.Run(ctx, crabbox.RunRequest{Root: repo, NoSync: true, Command: []string{"true"}})
			return err
		},
		"Exec": func(ctx context.Context, l *crabbox.Lease) error {
			_, err := l.Exec(ctx, run.Command{Command: []string{"true"}})
			return err
		},
		"SSH": func(ctx context.Context, l *crabbox.Lease) error {
			_, err := l.SSH(ctx)
			return err
		},
		"Shell": func(ctx context.Context, l *crabbox.Lease) error {
			_, err := l.Shell(ctx, crabbox.ShellOptions{Stdin: strings.NewReader("exit 0\n")})
			return err
		},
		"Touch": func(ctx context.Context, l *crabbox.Lease) error { return l.Touch(ctx) },
		"CheckoutDir": func(ctx context.Context, l *crabbox.Lease) error {
			_, _, err := l.CheckoutDir(ctx, repo)
			return err
		},
		"OpenSSHCommand": func(ctx context.Context, l *crabbox.Lease) error {
			_, err := l.OpenSSHCommand(ctx)
			return err
		},
		"OpenSSHCommandIn": func(ctx context.Context, l *crabbox.Lease) error {
			_, err := l.OpenSSHCommandIn(ctx, "/tmp")
			return err
		},
		"Release": func(ctx context.Context, l *crabbox.Lease) error { return l.Release(ctx) },
	}
}

// A lease handle that is closed, released, nil or not made by the client
// fails every use with an error, and never panics or connects again:
// after Close or Release, errors.Is(err, crabbox.ErrClosed).
func TestLeaseHandleMisuse(t *testing.T) {
	c := newClient(t, t.TempDir())
	ctx := context.Background()
	acquire := func(t *testing.T) *crabbox.Lease {
		l, err := c.Acquire(ctx, crabbox.AcquireOptions{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Stop(ctx, l.ID()) })
		return l
	}
	states := []struct {
		name       string
		lease      func(t *testing.T) *crabbox.Lease
		wantClosed bool
	}{
		{"after Close", func(t *testing.T) *crabbox.Lease {
			l := acquire(t)
			if _, err := l.SSH(ctx); err != nil { // connected once
				t.Fatal(err)
			}
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
			return l
		}, true},
		{"after Release", func(t *testing.T) *crabbox.Lease {
			l := acquire(t)
			if err := l.Release(ctx); err != nil {
				t.Fatal(err)
			}
			return l
		}, true},
		{"after Client.Close", func(t *testing.T) *crabbox.Lease {
			other := newClient(t, t.TempDir())
			l, err := other.Acquire(ctx, crabbox.AcquireOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if err := other.Close(); err != nil {
				t.Fatal(err)
			}
			return l
		}, true},
		{"nil", func(*testing.T) *crabbox.Lease { return nil }, false},
		{"not made by the client", func(*testing.T) *crabbox.Lease { return &crabbox.Lease{} }, false},
	}
	for _, st := range states {
		t.Run(st.name, func(t *testing.T) {
			l := st.lease(t)
			var id string // the accessors work on any handle
			call(t, "ID", func() error { id = l.ID(); return nil })
			for name, op := range leaseOps(t) {
				err := call(t, name, func() error { return op(ctx, l) })
				if err == nil || errors.Is(err, crabbox.ErrClosed) != st.wantClosed {
					t.Errorf("%s: error %v; want one, errors.Is(err, ErrClosed) %v", name, err, st.wantClosed)
				}
				if id != "" && err != nil && !strings.Contains(err.Error(), id) {
					t.Errorf("%s: error %q does not name the lease %s", name, err, id)
				}
			}
			err := call(t, "Close", l.Close)
			if st.wantClosed && err != nil || !st.wantClosed && err == nil {
				t.Errorf("Close: error %v; want one only for a handle that was never a lease", err)
			}
		})
	}
}

// A handle's own context must not be nil: every use with a nil context is
// an error, not a panic, and the handle stays usable.
func TestLeaseNilContext(t *testing.T) {
	c := newClient(t, t.TempDir())
	ctx := context.Background()
	l, err := c.Acquire(ctx, crabbox.AcquireOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx)
	var nilCtx context.Context
	for name, op := range leaseOps(t) {
		err := call(t, name, func() error { return op(nilCtx, l) })
		if err == nil || !strings.Contains(err.Error(), "nil context") {
			t.Errorf("%s(nil): error %v; want one saying nil context", name, err)
		}
	}
	if _, err := l.Exec(ctx, run.Command{Command: []string{"true"}}); err != nil {
		t.Errorf("Exec after the nil-context calls: %v", err)
	}
}

// Close is idempotent; Release ends the handle once: a second Release, or
// a Release after Close, releases nothing and says ErrClosed.
func TestCloseAndReleaseTwice(t *testing.T) {
	c := newClient(t, t.TempDir())
	ctx := context.Background()

	l, err := c.Acquire(ctx, crabbox.AcquireOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := l.Close(); err != nil {
		t.Errorf("second Close: %v, want nil", err)
	}
	if err := l.Release(ctx); !errors.Is(err, crabbox.ErrClosed) {
		t.Errorf("Release after Close: %v, want ErrClosed", err)
	}
	if _, err := c.Status(ctx, l.ID()); err != nil {
		t.Errorf("the closed handle's lease is not held any more, but still there: Status: %v", err)
	}
	if err := c.Stop(ctx, l.ID()); err != nil {
		t.Fatalf("Stop: %v", err)
	}

	l, err = c.Acquire(ctx, crabbox.AcquireOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatalf("Release: %v", err)
	}
	if err := l.Release(ctx); !errors.Is(err, crabbox.ErrClosed) {
		t.Errorf("second Release: %v, want ErrClosed", err)
	}
	if err := l.Close(); err != nil {
		t.Errorf("Close after Release: %v, want nil", err)
	}
	noLeases(t, c)
}

// clientOps are the methods of a client, each called with ctx (Doctor's
// first failed check is its error).
func clientOps(t *testing.T) map[string]func(context.Context, *crabbox.Client) error {
	repo := gitRepo(t)
	return map[string]func(context.Context, *crabbox.Client) error{
		"Acquire": func(ctx context.Context, c *crabbox.Client) error {
			l, err := c.Acquire(ctx, crabbox.AcquireOptions{})
			if err == nil {
				l.Release(context.Background())
			}
			return err
		},
		"Resolve": func(ctx context.Context, c *crabbox.Client) error {
			_, err := c.Resolve(ctx, "cbx_000000000000")
			return err
		},
		"List": func(ctx context.Context, c *crabbox.Client) error {
			_, err := c.List(ctx)
			return err
		},
		"Status": func(ctx context.Context, c *crabbox.Client) error {
			_, err := c.Status(ctx, "cbx_000000000000")
			return err
		},
		"Stop": func(ctx context.Context, c *crabbox.Client) error { return c.Stop(ctx, "cbx_000000000000") },
		"ShareConnection": func(ctx context.Context, c *crabbox.Client) error {
			return c.ShareConnection(ctx, "cbx_000000000000", filepath.Join(t.TempDir(), "s.sock"), time.Minute, nil)
		},
		"Cleanup": func(ctx context.Context, c *crabbox.Client) error {
			_, err := c.Cleanup(ctx, crabbox.CleanupOptions{})
			return err
		},
		"Run": func(ctx context.Context, c *crabbox.Client) error {
			_, err := c.Run(ctx, crabbox.RunRequest{Root: repo, Command: []string{"true"}})
			return err
		},
		"Runs": func(ctx context.Context, c *crabbox.Client) error {
			_, err := c.Runs(ctx, 0)
			return err
		},
		"RunLog": func(ctx context.Context, c *crabbox.Client) error {
			_, err := c.RunLog(ctx, "run_000000000000")
			return err
		},
		"Heartbeat": func(ctx context.Context, c *crabbox.Client) error {
			_, err := c.Heartbeat(ctx, "cbx_000000000000", crabbox.HeartbeatOptions{})
			return err
		},
		"Doctor": func(ctx context.Context, c *crabbox.Client) error {
			for _, ch := range c.Doctor(ctx, crabbox.DoctorOptions{}) {
				if !ch.OK {
					return fmt.Errorf("%s: %s", ch.Name, ch.Detail)
				}
			}
			return nil
		},
	}
}

// A nil Client, a zero Client and a closed Client fail every call with an
// error (ErrClosed for the closed one), never a panic.
func TestClientMisuse(t *testing.T) {
	ctx := context.Background()
	states := []struct {
		name       string
		client     func(t *testing.T) *crabbox.Client
		wantClosed bool
	}{
		{"nil", func(*testing.T) *crabbox.Client { return nil }, false},
		{"zero", func(*testing.T) *crabbox.Client { return &crabbox.Client{} }, false},
		{"closed", func(t *testing.T) *crabbox.Client {
			c := newClient(t, t.TempDir())
			if err := c.Close(); err != nil {
				t.Fatal(err)
			}
			return c
		}, true},
	}
	for _, st := range states {
		t.Run(st.name, func(t *testing.T) {
			c := st.client(t)
			for name, op := range clientOps(t) {
				err := call(t, name, func() error { return op(ctx, c) })
				if err == nil {
					t.Errorf("%s: no error", name)
					continue
				}
				if name != "Doctor" && errors.Is(err, crabbox.ErrClosed) != st.wantClosed {
					t.Errorf("%s: error %v; want errors.Is(err, ErrClosed) %v", name, err, st.wantClosed)
				}
			}
			if st.wantClosed {
				return
			}
			// The calls without a context. (The run history of a client
			// without a state directory is not kept in the current
			// directory: its calls fail.)
			var dir string
			call(t, "StateDir", func() error { dir = c.StateDir(); return nil })
			if dir != "" {
				t.Errorf("StateDir = %q, want none", dir)
			}
			for name, op := range map[string]func() error{
				"DamagedClaims": func() error { _, err := c.DamagedClaims(); return err },
				"Backend":       func() error { _, err := c.Backend(""); return err },
				"History.List":  func() error { _, err := c.History().List(0); return err },
				"History.Log":   func() error { _, err := c.History().Log("run_000000000000"); return err },
			} {
				if err := call(t, name, op); err == nil {
					t.Errorf("%s: no error", name)
				}
			}
			// Closing a zero client is harmless; a nil one is an error.
			if err := call(t, "Close", c.Close); (err != nil) != (c == nil) {
				t.Errorf("Close: error %v; want one only for a nil client", err)
			}
		})
	}
}

// A call with a nil context is an error before anything is written: no
// claim, no box, no history.
func TestClientNilContextLeavesNothing(t *testing.T) {
	state := t.TempDir()
	c := newClient(t, state)
	var nilCtx context.Context
	for name, op := range clientOps(t) {
		err := call(t, name, func() error { return op(nilCtx, c) })
		if err == nil || !strings.Contains(err.Error(), "nil context") {
			t.Errorf("%s(nil): error %v; want one saying nil context", name, err)
		}
	}
	noLeases(t, c)
	claims, err := crabbox.StoreOf(c).List()
	if err != nil {
		t.Fatal(err)
	}
	var left []string
	for _, cl := range claims {
		left = append(left, cl.ID)
	}
	for _, dir := range []string{"local", "history"} {
		if des, err := os.ReadDir(filepath.Join(state, dir)); err == nil {
			for _, de := range des {
				left = append(left, dir+"/"+de.Name())
			}
		}
	}
	if diff := cmp.Diff([]string(nil), left); diff != "" {
		t.Errorf("left behind by the nil-context calls (-want +got):\n%s", diff)
	}
}
