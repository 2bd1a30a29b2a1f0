package crabbox_test

import (
	"bytes"
	"errors"
	"net"
	"strings"
	"testing"

	"github.com/crabbox-dev/crabbox"
	"github.com/crabbox-dev/crabbox/provider"
)

// A provider without desktops refuses a lease asked for with one, and
// leaves nothing behind; the desktop calls refuse a lease without one.
// (The docker provider's tests take screenshots of real desktop boxes.)
func TestDesktopRefusals(t *testing.T) {
	c := newClient(t, t.TempDir())
	for _, opts := range []crabbox.AcquireOptions{
		{Desktop: true},
		{Labels: map[string]string{provider.DesktopLabel: "true"}},
	} {
		_, err := c.Acquire(t.Context(), opts)
		if !errors.Is(err, crabbox.ErrNoDesktop) || !strings.Contains(err.Error(), `provider "local" has no desktop`) {
			t.Errorf("Acquire(%+v) on the local provider = %v, want ErrNoDesktop naming it", opts, err)
		}
	}
	if _, err := c.Acquire(t.Context(), crabbox.AcquireOptions{Desktop: true, Pool: "p"}); !errors.Is(err, crabbox.ErrNoDesktop) {
		t.Errorf("Acquire from a pool with a desktop = %v, want ErrNoDesktop", err)
	}
	if infos, err := c.List(t.Context()); err != nil || len(infos) != 0 {
		t.Fatalf("leases after refused acquires: %v, %v", infos, err)
	}

	l, err := c.Acquire(t.Context(), crabbox.AcquireOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(t.Context())
	if l.Desktop() {
		t.Error("a plain lease says it has a desktop")
	}
	var buf bytes.Buffer
	if err := l.Screenshot(t.Context(), &buf); !errors.Is(err, crabbox.ErrNoDesktop) || buf.Len() != 0 {
		t.Errorf("Screenshot = %v with %d bytes written, want ErrNoDesktop and nothing", err, buf.Len())
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if err := l.ServeVNC(t.Context(), ln); !errors.Is(err, crabbox.ErrNoDesktop) {
		t.Errorf("ServeVNC = %v, want ErrNoDesktop", err)
	}
	if c, err := net.Dial("tcp", ln.Addr().String()); err == nil {
		c.Close()
		t.Error("the refused ServeVNC left its listener open")
	}
	if _, _, err := l.DesktopURL(); !errors.Is(err, crabbox.ErrNoDesktop) {
		t.Errorf("DesktopURL = %v, want ErrNoDesktop", err)
	}
}
