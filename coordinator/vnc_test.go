package coordinator_test

import (
	"bytes"
	"context"
	"image"
	"image/color"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/coder/websocket"
	"golang.org/x/crypto/ssh"

	"github.com/crabbox-dev/crabbox/coordinator/api"
	"github.com/crabbox-dev/crabbox/internal/rfb"
	"github.com/crabbox-dev/crabbox/internal/rfb/rfbtest"
	"github.com/crabbox-dev/crabbox/internal/sshserver"
	"github.com/crabbox-dev/crabbox/internal/sshserver/sshservertest"
	"github.com/crabbox-dev/crabbox/provider"
)

// desktopBox is a fake desktop box: crabbox's SSH server accepting the
// coordinator's access key of lease id, whose direct-tcpip channels to
// the desktop's VNC address reach a fake VNC server showing screen.
type desktopBox struct {
	host string
	port int
	key  string // host key, authorized_keys form
	vnc  *rfbtest.Server
	// dials counts connections to the VNC server.
	dials chan struct{}
}

func newDesktopBox(t *testing.T, accessKey string, screen *image.RGBA) *desktopBox {
	t.Helper()
	authorized, _, _, _, err := ssh.ParseAuthorizedKey([]byte(accessKey))
	if err != nil {
		t.Fatalf("access key %q: %v", accessKey, err)
	}
	hostKey := sshservertest.NewSigner(t)
	b := &desktopBox{vnc: rfbtest.NewServer(screen), dials: make(chan struct{}, 16)}
	vncAddr := b.vnc.Listen(t)
	addr := sshservertest.Serve(t, sshserver.Config{
		HostKey: hostKey, AuthorizedKey: authorized, Dir: t.TempDir(), ForwardTCP: true,
		DialForward: func(addr string) (net.Conn, error) {
			if addr != provider.DesktopVNCAddr {
				return nil, &net.OpError{Op: "dial", Net: "tcp", Err: net.UnknownNetworkError(addr)}
			}
			b.dials <- struct{}{}
			return net.Dial("tcp", vncAddr)
		},
	})
	b.host, b.port = addr.IP.String(), addr.Port
	b.key = strings.TrimSpace(string(ssh.MarshalAuthorizedKey(hostKey.PublicKey())))
	return b
}

// registerDesktop registers lease id for token with labels, and returns
// the coordinator's access key for it.
func (e *env) registerDesktop(token, id string, labels map[string]string) string {
	e.t.Helper()
	reg := api.RegistrationRequest{Provider: "ssh", Host: "127.0.0.1", SSHPort: "22", SSHUser: "crabbox", Labels: labels}
	e.do("PUT", leasePath(id, "/registration"), token, reg, http.StatusCreated, nil)
	return e.srv.AccessPublicKey(id)
}

// pointAt re-registers lease id at box.
func (e *env) pointAt(token, id string, labels map[string]string, b *desktopBox) {
	e.t.Helper()
	reg := api.RegistrationRequest{Provider: "ssh", Host: b.host, SSHPort: strconv.Itoa(b.port), SSHUser: "crabbox", SSHHostKey: b.key, Labels: labels}
	e.do("PUT", leasePath(id, "/registration"), token, reg, http.StatusOK, nil)
}

// dialVNC opens the lease's VNC websocket as token.
func (e *env) dialVNC(ctx context.Context, token, id string) (*websocket.Conn, *http.Response, error) {
	h := http.Header{}
	if token != "" {
		h.Set("Authorization", "Bearer "+token)
	}
	return websocket.Dial(ctx, "ws"+strings.TrimPrefix(e.url, "http")+leasePath(id, "/vnc"), &websocket.DialOptions{HTTPHeader: h})
}

func solid(w, h int, c color.RGBA) *image.RGBA {
	img := image.NewRGBA(image.Rect(0, 0, w, h))
	for y := range h {
		for x := range w {
			img.SetRGBA(x, y, c)
		}
	}
	return img
}

// The VNC websocket relays the RFB stream of a desktop lease's box: an
// RFB client on it takes the box's screen.
func TestLeaseVNC(t *testing.T) {
	eachStore(t, func(t *testing.T, open opener) {
		e := simple(t, open)
		alice := e.token("alice", "acme")
		desktop := map[string]string{provider.DesktopLabel: "true"}
		access := e.registerDesktop(alice, "desk-1", desktop)
		if access == "" {
			t.Fatal("the owner's lease has no access key")
		}
		screen := solid(32, 24, color.RGBA{0x1e, 0x90, 0xff, 0xff})
		screen.SetRGBA(5, 7, color.RGBA{0xff, 0x88, 0, 0xff})
		box := newDesktopBox(t, access, screen)
		e.pointAt(alice, "desk-1", desktop, box)

		ws, _, err := e.dialVNC(t.Context(), alice, "desk-1")
		if err != nil {
			t.Fatal(err)
		}
		defer ws.CloseNow()
		c, err := rfb.Handshake(websocket.NetConn(t.Context(), ws, websocket.MessageBinary))
		if err != nil {
			t.Fatal(err)
		}
		img, err := c.Snapshot()
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(img.Pix, screen.Pix) {
			t.Errorf("the desktop through the coordinator: (5,7) = %v, (0,0) = %v; want %v, %v",
				img.RGBAAt(5, 7), img.RGBAAt(0, 0), screen.RGBAAt(5, 7), screen.RGBAAt(0, 0))
		}

		// At most 8 open to one lease (this one still is): the 9th is
		// refused before the upgrade.
		for i := range 7 {
			ws, _, err := e.dialVNC(t.Context(), alice, "desk-1")
			if err != nil {
				t.Fatalf("desktop connection %d: %v", i+2, err)
			}
			defer ws.CloseNow()
		}
		if _, resp, err := e.dialVNC(t.Context(), alice, "desk-1"); err == nil || resp == nil || resp.StatusCode != http.StatusTooManyRequests {
			t.Errorf("a 9th desktop connection = %v, want 429", err)
		}
	})
}

// Who may open the websocket, and what is answered before any upgrade.
func TestLeaseVNCRefusals(t *testing.T) {
	eachStore(t, func(t *testing.T, open opener) {
		e := simple(t, open)
		alice, bob := e.token("alice", "acme"), e.token("bob", "acme")
		desktop := map[string]string{provider.DesktopLabel: "true"}
		access := e.registerDesktop(alice, "desk-1", desktop)
		box := newDesktopBox(t, access, solid(4, 4, color.RGBA{A: 255}))
		e.pointAt(alice, "desk-1", desktop, box)
		e.registerDesktop(alice, "plain-1", nil)
		// A box that does not take the coordinator's access key.
		other := newDesktopBox(t, strings.TrimSpace(string(ssh.MarshalAuthorizedKey(sshservertest.NewSigner(t).PublicKey()))), solid(4, 4, color.RGBA{A: 255}))
		e.registerDesktop(alice, "locked-1", desktop)
		e.pointAt(alice, "locked-1", desktop, other)

		for _, tc := range []struct {
			name, token, id string
			status          int
		}{
			{"no token", "", "desk-1", http.StatusUnauthorized},
			{"another user", bob, "desk-1", http.StatusNotFound},
			{"no desktop", alice, "plain-1", http.StatusConflict},
			{"box without the access key", alice, "locked-1", http.StatusBadGateway},
		} {
			t.Run(tc.name, func(t *testing.T) {
				_, resp, err := e.dialVNC(t.Context(), tc.token, tc.id)
				if err == nil || resp == nil || resp.StatusCode != tc.status {
					code := 0
					if resp != nil {
						code = resp.StatusCode
					}
					t.Errorf("dial = %v (status %d), want status %d", err, code, tc.status)
				}
			})
		}
		// A plain GET is told to upgrade.
		e.fail("GET", leasePath("desk-1", "/vnc"), alice, nil, http.StatusUpgradeRequired, api.CodeWebsocketRequired)
		// A released lease's desktop is gone.
		e.do("POST", leasePath("desk-1", "/release"), alice, map[string]any{}, http.StatusOK, nil)
		if _, resp, err := e.dialVNC(t.Context(), alice, "desk-1"); err == nil || resp == nil || resp.StatusCode != http.StatusConflict {
			t.Errorf("dial a released lease = %v, want 409", err)
		}
		if n := len(box.dials); n != 0 {
			t.Errorf("the VNC server was reached %d times by refused requests", n)
		}
	})
}
