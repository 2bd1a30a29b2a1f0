// Package rfbtest is a fake VNC server (RFB 3.8, security None) for tests
// of RFB clients: it serves a screen the test sets, in Raw rectangles
// (optionally split over several updates, or with a CopyRect), and
// records the pointer and key events clients send.
package rfbtest

import (
	"encoding/binary"
	"errors"
	"fmt"
	"image"
	"io"
	"net"
	"sync"
	"testing"
)

// Event is a pointer or key event a client sent.
type Event struct {
	// Pointer events: X, Y and the button mask.
	Pointer bool
	X, Y    int
	Buttons byte
	// Key events: Down and the X keysym.
	Key    bool
	Down   bool
	Keysym uint32
}

// Server is a fake VNC server.
type Server struct {
	// Splits, when above 1, sends a full screen as that many updates of
	// horizontal bands, each answering one request.
	Splits int
	// CopyTop, when set, sends the screen's top row band as a CopyRect
	// of the band below it (both must look alike).
	CopyTop bool
	// Greeting replaces the "RFB 003.008\n" version greeting.
	Greeting string
	// SecurityTypes replaces the offered security types ([1]: None).
	SecurityTypes []byte

	mu      sync.Mutex
	screen  *image.RGBA
	changed chan struct{} // closed and replaced by SetScreen
	events  []Event
	evCh    chan struct{} // closed and replaced when an event arrives
}

// NewServer returns a server showing screen.
func NewServer(screen *image.RGBA) *Server {
	return &Server{screen: screen, changed: make(chan struct{}), evCh: make(chan struct{})}
}

// SetScreen changes the screen; clients waiting on an incremental update
// get it.
func (s *Server) SetScreen(img *image.RGBA) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.screen = img
	close(s.changed)
	s.changed = make(chan struct{})
}

// Events returns the events received so far and a channel closed when
// another arrives.
func (s *Server) Events() ([]Event, <-chan struct{}) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Event(nil), s.events...), s.evCh
}

func (s *Server) record(e Event) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.events = append(s.events, e)
	close(s.evCh)
	s.evCh = make(chan struct{})
}

// Listen serves on a new loopback listener until the test ends and
// returns its address.
func (s *Server) Listen(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	conns := map[net.Conn]bool{}
	var mu sync.Mutex
	wg.Go(func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns[c] = true
			mu.Unlock()
			wg.Go(func() {
				defer c.Close()
				_ = s.Serve(c)
			})
		}
	})
	t.Cleanup(func() {
		_ = l.Close()
		mu.Lock()
		for c := range conns {
			_ = c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return l.Addr().String()
}

// Serve speaks RFB on rw until the client goes or breaks the protocol.
func (s *Server) Serve(rw io.ReadWriter) error {
	greeting := s.Greeting
	if greeting == "" {
		greeting = "RFB 003.008\n"
	}
	if _, err := io.WriteString(rw, greeting); err != nil {
		return err
	}
	var version [12]byte
	if _, err := io.ReadFull(rw, version[:]); err != nil {
		return err
	}
	if string(version[:]) != "RFB 003.008\n" {
		return fmt.Errorf("client version %q", version[:])
	}
	types := s.SecurityTypes
	if types == nil {
		types = []byte{1}
	}
	if _, err := rw.Write(append([]byte{byte(len(types))}, types...)); err != nil {
		return err
	}
	if len(types) == 0 {
		_, err := rw.Write(append([]byte{0, 0, 0, 7}, "go away"...))
		return err
	}
	var b [1]byte
	if _, err := io.ReadFull(rw, b[:]); err != nil {
		return err
	}
	if b[0] != 1 {
		return fmt.Errorf("client chose security type %d", b[0])
	}
	if _, err := rw.Write([]byte{0, 0, 0, 0}); err != nil {
		return err
	}
	if _, err := io.ReadFull(rw, b[:]); err != nil { // ClientInit
		return err
	}
	s.mu.Lock()
	w, h := s.screen.Rect.Dx(), s.screen.Rect.Dy()
	s.mu.Unlock()
	init := binary.BigEndian.AppendUint16(nil, uint16(w))
	init = binary.BigEndian.AppendUint16(init, uint16(h))
	// The server's own pixel format (the client sets its own).
	init = append(init, 32, 24, 0, 1, 0, 255, 0, 255, 0, 255, 16, 8, 0, 0, 0, 0)
	name := "crabbox test desktop"
	init = binary.BigEndian.AppendUint32(init, uint32(len(name)))
	init = append(init, name...)
	if _, err := rw.Write(init); err != nil {
		return err
	}
	return s.messages(rw)
}

// messages answers the client's messages. An incremental update request
// is answered when the screen changes, by a goroutine, so that events
// keep being read meanwhile.
func (s *Server) messages(rw io.ReadWriter) error {
	var (
		wmu     sync.Mutex // serialises writes
		waiting sync.WaitGroup
		pending bool // an incremental request waits for a change
		pmu     sync.Mutex
	)
	done := make(chan struct{})
	defer func() {
		close(done)
		waiting.Wait()
	}()
	send := func(screen *image.RGBA, i, n int) error {
		wmu.Lock()
		defer wmu.Unlock()
		return s.band(rw, screen, i, n)
	}
	sent := 0 // bands of the current full update sent
	for {
		var typ [1]byte
		if _, err := io.ReadFull(rw, typ[:]); err != nil {
			return err
		}
		switch typ[0] {
		case 0: // SetPixelFormat
			var pf [19]byte
			if _, err := io.ReadFull(rw, pf[:]); err != nil {
				return err
			}
			if pf[3] != 32 || pf[6] != 1 || pf[13] != 16 || pf[14] != 8 || pf[15] != 0 || pf[5] != 0 {
				return fmt.Errorf("pixel format %v: this fake serves 32-bit little-endian 0x00RRGGBB only", pf[3:16])
			}
		case 2: // SetEncodings
			var h [3]byte
			if _, err := io.ReadFull(rw, h[:]); err != nil {
				return err
			}
			if _, err := io.CopyN(io.Discard, rw, 4*int64(binary.BigEndian.Uint16(h[1:]))); err != nil {
				return err
			}
		case 3: // FramebufferUpdateRequest
			var req [9]byte
			if _, err := io.ReadFull(rw, req[:]); err != nil {
				return err
			}
			s.mu.Lock()
			screen, changed := s.screen, s.changed
			s.mu.Unlock()
			if req[0] == 1 {
				pmu.Lock()
				if pending {
					pmu.Unlock()
					continue
				}
				pending = true
				pmu.Unlock()
				waiting.Go(func() {
					select {
					case <-changed:
					case <-done:
						return
					}
					s.mu.Lock()
					screen := s.screen
					s.mu.Unlock()
					pmu.Lock()
					pending = false
					pmu.Unlock()
					_ = send(screen, 0, 1)
				})
				continue
			}
			splits := max(s.Splits, 1)
			if err := send(screen, sent, splits); err != nil {
				return err
			}
			sent = (sent + 1) % splits
		case 4: // KeyEvent
			var k [7]byte
			if _, err := io.ReadFull(rw, k[:]); err != nil {
				return err
			}
			s.record(Event{Key: true, Down: k[0] == 1, Keysym: binary.BigEndian.Uint32(k[3:])})
		case 5: // PointerEvent
			var p [5]byte
			if _, err := io.ReadFull(rw, p[:]); err != nil {
				return err
			}
			s.record(Event{Pointer: true, Buttons: p[0], X: int(binary.BigEndian.Uint16(p[1:])), Y: int(binary.BigEndian.Uint16(p[3:]))})
		case 6: // ClientCutText
			var h [7]byte
			if _, err := io.ReadFull(rw, h[:]); err != nil {
				return err
			}
			if _, err := io.CopyN(io.Discard, rw, int64(binary.BigEndian.Uint32(h[3:]))); err != nil {
				return err
			}
		default:
			return errors.New("unknown client message")
		}
	}
}

// band sends band i of n of screen as one update.
func (s *Server) band(w io.Writer, screen *image.RGBA, i, n int) error {
	b := screen.Rect
	y0, y1 := b.Dy()*i/n, b.Dy()*(i+1)/n
	var msg []byte
	rects := [][4]int{{0, y0, b.Dx(), y1 - y0}}
	copyTop := s.CopyTop && n == 1 && b.Dy() >= 2
	if copyTop {
		half := b.Dy() / 2
		rects = [][4]int{{0, half, b.Dx(), b.Dy() - half}}
	}
	count := len(rects)
	if copyTop {
		count++
	}
	msg = append(msg, 0, 0)
	msg = binary.BigEndian.AppendUint16(msg, uint16(count))
	for _, r := range rects {
		msg = rectHeader(msg, r, 0)
		for y := r[1]; y < r[1]+r[3]; y++ {
			for x := r[0]; x < r[0]+r[2]; x++ {
				c := screen.RGBAAt(b.Min.X+x, b.Min.Y+y)
				msg = append(msg, c.B, c.G, c.R, 0)
			}
		}
	}
	if copyTop {
		half := b.Dy() / 2
		msg = rectHeader(msg, [4]int{0, 0, b.Dx(), half}, 1)
		msg = binary.BigEndian.AppendUint16(msg, 0)
		msg = binary.BigEndian.AppendUint16(msg, uint16(half))
	}
	_, err := w.Write(msg)
	return err
}

func rectHeader(msg []byte, r [4]int, enc uint32) []byte {
	for _, v := range r {
		msg = binary.BigEndian.AppendUint16(msg, uint16(v))
	}
	return binary.BigEndian.AppendUint32(msg, enc)
}
