package rfb_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"image"
	"image/color"
	"io"
	"net"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"

	"github.com/crabbox-dev/crabbox/internal/rfb"
	"github.com/crabbox-dev/crabbox/internal/rfb/rfbtest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// testScreen is a screen of four coloured quadrants, with a one-pixel
// white dot at (3, 1), and the top half equal to the bottom half when
// mirrored is set.
func testScreen(w, h int) *image.RGBA {
	img := image.NewRGBA(image.Rect(0, 0, w, h))
	for y := range h {
		for x := range w {
			c := color.RGBA{A: 255}
			switch {
			case x < w/2 && y%(h/2) < h/4:
				c.R = 200
			case x >= w/2 && y%(h/2) < h/4:
				c.G = 180
			case x < w/2:
				c.B = 160
			default:
				c.R, c.G, c.B = 10, 20, 30
			}
			img.SetRGBA(x, y, c)
		}
	}
	img.SetRGBA(3, 1, color.RGBA{255, 255, 255, 255})
	img.SetRGBA(3, 1+h/2, color.RGBA{255, 255, 255, 255})
	return img
}

func screenshot(t *testing.T, s *rfbtest.Server) (*image.RGBA, error) {
	t.Helper()
	conn, err := net.Dial("tcp", s.Listen(t))
	if err != nil {
		t.Fatal(err)
	}
	return rfb.Screenshot(t.Context(), conn)
}

func TestScreenshot(t *testing.T) {
	want := testScreen(64, 48)
	for _, tc := range []struct {
		name string
		srv  func() *rfbtest.Server
	}{
		{"one update", func() *rfbtest.Server { return rfbtest.NewServer(want) }},
		{"three updates", func() *rfbtest.Server { s := rfbtest.NewServer(want); s.Splits = 3; return s }},
		{"copyrect", func() *rfbtest.Server { s := rfbtest.NewServer(want); s.CopyTop = true; return s }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := screenshot(t, tc.srv())
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(want.Rect, got.Rect); diff != "" {
				t.Fatalf("size (-want +got):\n%s", diff)
			}
			if !bytes.Equal(want.Pix, got.Pix) {
				t.Errorf("pixels differ: at (3,1) got %v, want %v; at (60,40) got %v, want %v",
					got.RGBAAt(3, 1), want.RGBAAt(3, 1), got.RGBAAt(60, 40), want.RGBAAt(60, 40))
			}
		})
	}
}

func TestHandshakeRefusals(t *testing.T) {
	for _, tc := range []struct {
		name string
		srv  func(*rfbtest.Server)
		want string
	}{
		{"old version", func(s *rfbtest.Server) { s.Greeting = "RFB 003.003\n" }, "needs 3.8"},
		{"not rfb", func(s *rfbtest.Server) { s.Greeting = "SSH-2.0-hi\r\n" }, "not an RFB protocol version"},
		{"password only", func(s *rfbtest.Server) { s.SecurityTypes = []byte{2} }, "wants authentication"},
		{"refused", func(s *rfbtest.Server) { s.SecurityTypes = []byte{} }, `refused the connection: "go away"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := rfbtest.NewServer(testScreen(8, 8))
			tc.srv(s)
			_, err := screenshot(t, s)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Screenshot = %v, want an error containing %q", err, tc.want)
			}
		})
	}
}

// scripted is a server that sends a fixed byte stream and discards what
// the client writes.
type scripted struct {
	r io.Reader
}

func (s scripted) Read(p []byte) (int, error)  { return s.r.Read(p) }
func (s scripted) Write(p []byte) (int, error) { return len(p), nil }

// greeting is a server's handshake up to and including ServerInit of a
// w x h screen.
func greeting(w, h uint16) []byte {
	b := []byte("RFB 003.008\n")
	b = append(b, 1, 1, 0, 0, 0, 0)
	b = binary.BigEndian.AppendUint16(b, w)
	b = binary.BigEndian.AppendUint16(b, h)
	b = append(b, make([]byte, 16)...)
	return binary.BigEndian.AppendUint32(b, 0)
}

func rect(x, y, w, h uint16, enc uint32) []byte {
	var b []byte
	for _, v := range []uint16{x, y, w, h} {
		b = binary.BigEndian.AppendUint16(b, v)
	}
	return binary.BigEndian.AppendUint32(b, enc)
}

// Whatever a server sends, the client stores only pixels inside the
// screen and allocates only what the limits allow.
func TestHostileServer(t *testing.T) {
	for _, tc := range []struct {
		name   string
		stream []byte
		want   string
	}{
		{"huge screen", greeting(65535, 65535), "not a size"},
		{"empty screen", greeting(0, 10), "not a size"},
		{"huge name", append(greeting(4, 4)[:len(greeting(4, 4))-4], 0xff, 0xff, 0xff, 0xff), "longer than"},
		{"rect outside", append(append(greeting(4, 4), 0, 0, 0, 1), rect(2, 2, 4, 4, 0)...), "outside the 4x4 screen"},
		{"copy from outside", append(append(append(greeting(4, 4), 0, 0, 0, 1), rect(0, 0, 2, 2, 1)...), 0, 3, 0, 3), "from outside"},
		{"unknown encoding", append(append(greeting(4, 4), 0, 0, 0, 1), rect(0, 0, 1, 1, 16)...), "encoding 16"},
		{"colour map", append(greeting(4, 4), 1), "colour map"},
		{"unknown message", append(greeting(4, 4), 9), "message type 9"},
		{"cut off pixels", append(append(greeting(4, 4), 0, 0, 0, 1), rect(0, 0, 4, 4, 0)...), "read pixels"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := rfb.Handshake(scripted{bytes.NewReader(tc.stream)})
			if err == nil {
				_, err = c.Snapshot()
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("got %v, want an error containing %q", err, tc.want)
			}
		})
	}
}

// An update that never covers the whole screen ends after a bound.
func TestNeverWholeScreen(t *testing.T) {
	stream := greeting(4, 4)
	for range 100 {
		stream = append(stream, 2) // a bell between updates is skipped
		stream = append(stream, 0, 0, 0, 1)
		stream = append(append(stream, rect(0, 0, 1, 1, 0)...), 1, 2, 3, 0)
	}
	c, err := rfb.Handshake(scripted{bytes.NewReader(stream)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Snapshot(); err == nil || !strings.Contains(err.Error(), "without the whole screen") {
		t.Errorf("Snapshot = %v, want it to give up", err)
	}
}

// Cancelling the context ends a screenshot whose server never answers.
func TestScreenshotCancelled(t *testing.T) {
	client, server := net.Pipe()
	defer server.Close()
	ctx, cancel := context.WithCancelCause(context.Background())
	cause := errors.New("the user gave up")
	done := make(chan error, 1)
	go func() {
		_, err := rfb.Screenshot(ctx, client)
		done <- err
	}()
	cancel(cause)
	if err := <-done; !errors.Is(err, cause) {
		t.Errorf("Screenshot = %v, want %v", err, cause)
	}
}

func FuzzSnapshot(f *testing.F) {
	f.Add(append(append(greeting(4, 4), 0, 0, 0, 1), rect(0, 0, 4, 4, 0)...))
	f.Add(append(append(append(greeting(4, 4), 0, 0, 0, 1), rect(0, 0, 2, 2, 1)...), 0, 2, 0, 2))
	f.Fuzz(func(t *testing.T, stream []byte) {
		c, err := rfb.Handshake(scripted{bytes.NewReader(stream)})
		if err != nil {
			return
		}
		if img, err := c.Snapshot(); err == nil && img.Rect.Dx() != c.Width {
			t.Errorf("a %dx%d screen gave a %v image", c.Width, c.Height, img.Rect)
		}
	})
}
