// Package rfb is a minimal client of the remote framebuffer protocol
// (RFB 3.8, RFC 6143), the protocol of VNC servers: enough to take a
// picture of a desktop box's screen (crabbox screenshot). It speaks
// version 3.8 with security type None only (a box's VNC server listens on
// the box's loopback and is reached through the lease's SSH connection,
// which is the authentication), asks for 32-bit true-colour pixels in the
// Raw and CopyRect encodings, and reads framebuffer updates until the
// whole screen has been sent once.
//
// Everything the server sends is outside input: sizes are bounded and
// rectangles checked against the screen before any pixel is stored.
package rfb

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"image"
	"io"
	"net"
)

// Limits on what a server may make the client allocate or loop over.
const (
	// MaxDimension bounds the screen's width and height.
	MaxDimension = 16384
	// maxText bounds a desktop name, a failure reason or cut text.
	maxText = 1 << 16
	// maxUpdates bounds how many framebuffer updates Screenshot reads
	// before the whole screen must have been sent.
	maxUpdates = 64
	// maxRects bounds the rectangles of one update.
	maxRects = 1 << 16
)

// Message types and encodings used here (RFC 6143, section 7).
const (
	msgSetPixelFormat    = 0
	msgSetEncodings      = 2
	msgUpdateRequest     = 3
	msgFramebufferUpdate = 0
	msgSetColourMap      = 1
	msgBell              = 2
	msgServerCutText     = 3
	encodingRaw          = 0
	encodingCopyRect     = 1
	securityNone         = 1
)

// Conn is an RFB connection past its handshake.
type Conn struct {
	rw io.ReadWriter
	// Width and Height are the screen's size in pixels.
	Width, Height int
	// Name is the desktop's name as the server gives it.
	Name string
}

// Handshake speaks the RFB 3.8 handshake on rw with security type None,
// asks for a shared session, sets the pixel format to 32-bit true colour
// (little-endian 0x00RRGGBB) and the encodings to Raw and CopyRect.
func Handshake(rw io.ReadWriter) (*Conn, error) {
	var version [12]byte
	if _, err := io.ReadFull(rw, version[:]); err != nil {
		return nil, fmt.Errorf("read the server's protocol version: %w", err)
	}
	var major, minor int
	if _, err := fmt.Sscanf(string(version[:]), "RFB %03d.%03d\n", &major, &minor); err != nil {
		return nil, fmt.Errorf("the server's greeting %q is not an RFB protocol version", version[:])
	}
	if major != 3 || minor < 8 {
		return nil, fmt.Errorf("the server speaks RFB %d.%d; this client needs 3.8", major, minor)
	}
	if _, err := io.WriteString(rw, "RFB 003.008\n"); err != nil {
		return nil, fmt.Errorf("send the protocol version: %w", err)
	}
	if err := security(rw); err != nil {
		return nil, err
	}
	if _, err := rw.Write([]byte{1}); err != nil { // ClientInit: shared
		return nil, fmt.Errorf("send client init: %w", err)
	}
	var init [24]byte // ServerInit without the name
	if _, err := io.ReadFull(rw, init[:]); err != nil {
		return nil, fmt.Errorf("read server init: %w", err)
	}
	c := &Conn{rw: rw, Width: int(binary.BigEndian.Uint16(init[0:])), Height: int(binary.BigEndian.Uint16(init[2:]))}
	if c.Width == 0 || c.Height == 0 || c.Width > MaxDimension || c.Height > MaxDimension {
		return nil, fmt.Errorf("the server's screen is %dx%d: not a size this client takes (1 to %d each)", c.Width, c.Height, MaxDimension)
	}
	name, err := readText(rw, binary.BigEndian.Uint32(init[20:]))
	if err != nil {
		return nil, fmt.Errorf("read the desktop name: %w", err)
	}
	c.Name = name
	msg := make([]byte, 0, 20+12)
	msg = append(msg, msgSetPixelFormat, 0, 0, 0)
	// 32 bits per pixel, depth 24, little-endian, true colour, max
	// 255 each, shifts red 16, green 8, blue 0, padding.
	msg = append(msg, 32, 24, 0, 1, 0, 255, 0, 255, 0, 255, 16, 8, 0, 0, 0, 0)
	msg = append(msg, msgSetEncodings, 0, 0, 2)
	msg = binary.BigEndian.AppendUint32(msg, encodingCopyRect)
	msg = binary.BigEndian.AppendUint32(msg, encodingRaw)
	if _, err := rw.Write(msg); err != nil {
		return nil, fmt.Errorf("send the pixel format and encodings: %w", err)
	}
	return c, nil
}

// security chooses security type None and reads its result.
func security(rw io.ReadWriter) error {
	var n [1]byte
	if _, err := io.ReadFull(rw, n[:]); err != nil {
		return fmt.Errorf("read the security types: %w", err)
	}
	if n[0] == 0 {
		return refused(rw, "the server refused the connection")
	}
	types := make([]byte, n[0])
	if _, err := io.ReadFull(rw, types); err != nil {
		return fmt.Errorf("read the security types: %w", err)
	}
	found := false
	for _, t := range types {
		found = found || t == securityNone
	}
	if !found {
		return fmt.Errorf("the server wants authentication (security types %v); a box's VNC server must offer None (1)", types)
	}
	if _, err := rw.Write([]byte{securityNone}); err != nil {
		return fmt.Errorf("choose security type None: %w", err)
	}
	var result [4]byte
	if _, err := io.ReadFull(rw, result[:]); err != nil {
		return fmt.Errorf("read the security result: %w", err)
	}
	if binary.BigEndian.Uint32(result[:]) != 0 {
		return refused(rw, "the server refused security type None")
	}
	return nil
}

// refused reads the reason string that follows a refusal.
func refused(r io.Reader, what string) error {
	var n [4]byte
	if _, err := io.ReadFull(r, n[:]); err != nil {
		return fmt.Errorf("%s", what)
	}
	reason, err := readText(r, binary.BigEndian.Uint32(n[:]))
	if err != nil {
		return fmt.Errorf("%s", what)
	}
	return fmt.Errorf("%s: %q", what, reason)
}

// readText reads a string of n bytes, at most maxText.
func readText(r io.Reader, n uint32) (string, error) {
	if n > maxText {
		return "", fmt.Errorf("a text of %d bytes is longer than %d", n, maxText)
	}
	b := make([]byte, n)
	if _, err := io.ReadFull(r, b); err != nil {
		return "", err
	}
	return string(b), nil
}

// Snapshot asks for the whole screen and reads updates until every pixel
// of it has been sent, and returns the screen.
func (c *Conn) Snapshot() (*image.RGBA, error) {
	img := image.NewRGBA(image.Rect(0, 0, c.Width, c.Height))
	for i := range len(img.Pix) / 4 {
		img.Pix[i*4+3] = 255
	}
	covered := make([]bool, c.Width*c.Height)
	missing := len(covered)
	for range maxUpdates {
		req := []byte{msgUpdateRequest, 0, 0, 0, 0, 0}
		req = binary.BigEndian.AppendUint16(req, uint16(c.Width))
		req = binary.BigEndian.AppendUint16(req, uint16(c.Height))
		if _, err := c.rw.Write(req); err != nil {
			return nil, fmt.Errorf("ask for the screen: %w", err)
		}
		rects, err := c.readUpdate(img)
		if err != nil {
			return nil, err
		}
		for _, r := range rects {
			for y := r.Min.Y; y < r.Max.Y; y++ {
				for x := r.Min.X; x < r.Max.X; x++ {
					if !covered[y*c.Width+x] {
						covered[y*c.Width+x] = true
						missing--
					}
				}
			}
		}
		if missing == 0 {
			return img, nil
		}
	}
	return nil, fmt.Errorf("the server sent %d updates without the whole screen", maxUpdates)
}

// readUpdate reads server messages until a framebuffer update, draws it
// into img and returns its rectangles.
func (c *Conn) readUpdate(img *image.RGBA) ([]image.Rectangle, error) {
	for {
		var typ [1]byte
		if _, err := io.ReadFull(c.rw, typ[:]); err != nil {
			return nil, fmt.Errorf("read a server message: %w", err)
		}
		switch typ[0] {
		case msgFramebufferUpdate:
			return c.readRects(img)
		case msgBell:
		case msgServerCutText:
			var h [7]byte
			if _, err := io.ReadFull(c.rw, h[:]); err != nil {
				return nil, fmt.Errorf("read cut text: %w", err)
			}
			if _, err := readText(c.rw, binary.BigEndian.Uint32(h[3:])); err != nil {
				return nil, fmt.Errorf("read cut text: %w", err)
			}
		case msgSetColourMap:
			return nil, errors.New("the server sent a colour map for a true-colour pixel format")
		default:
			return nil, fmt.Errorf("the server sent message type %d, which this client does not know", typ[0])
		}
	}
}

// readRects reads the rectangles of a framebuffer update into img.
func (c *Conn) readRects(img *image.RGBA) ([]image.Rectangle, error) {
	var h [3]byte
	if _, err := io.ReadFull(c.rw, h[:]); err != nil {
		return nil, fmt.Errorf("read an update: %w", err)
	}
	n := int(binary.BigEndian.Uint16(h[1:]))
	if n > maxRects {
		return nil, fmt.Errorf("an update of %d rectangles", n)
	}
	screen := img.Rect
	var rects []image.Rectangle
	for range n {
		var rh [12]byte
		if _, err := io.ReadFull(c.rw, rh[:]); err != nil {
			return nil, fmt.Errorf("read a rectangle: %w", err)
		}
		x, y := int(binary.BigEndian.Uint16(rh[0:])), int(binary.BigEndian.Uint16(rh[2:]))
		w, hh := int(binary.BigEndian.Uint16(rh[4:])), int(binary.BigEndian.Uint16(rh[6:]))
		enc := int32(binary.BigEndian.Uint32(rh[8:]))
		r := image.Rect(x, y, x+w, y+hh)
		if !r.In(screen) {
			return nil, fmt.Errorf("the server sent rectangle %v outside the %dx%d screen", r, c.Width, c.Height)
		}
		switch enc {
		case encodingRaw:
			if err := c.readRaw(img, r); err != nil {
				return nil, err
			}
		case encodingCopyRect:
			var src [4]byte
			if _, err := io.ReadFull(c.rw, src[:]); err != nil {
				return nil, fmt.Errorf("read a copied rectangle: %w", err)
			}
			sx, sy := int(binary.BigEndian.Uint16(src[0:])), int(binary.BigEndian.Uint16(src[2:]))
			from := image.Rect(sx, sy, sx+w, sy+hh)
			if !from.In(screen) {
				return nil, fmt.Errorf("the server copied rectangle %v from outside the %dx%d screen", from, c.Width, c.Height)
			}
			copyRect(img, r, from.Min)
		default:
			return nil, fmt.Errorf("the server sent a rectangle in encoding %d, which this client did not ask for", enc)
		}
		rects = append(rects, r)
	}
	return rects, nil
}

// readRaw reads the raw pixels of r (32 bits each, 0x00RRGGBB
// little-endian) into img, a row at a time.
func (c *Conn) readRaw(img *image.RGBA, r image.Rectangle) error {
	row := make([]byte, r.Dx()*4)
	for y := r.Min.Y; y < r.Max.Y; y++ {
		if _, err := io.ReadFull(c.rw, row); err != nil {
			return fmt.Errorf("read pixels: %w", err)
		}
		dst := img.Pix[img.PixOffset(r.Min.X, y):]
		for i := 0; i < len(row); i += 4 {
			dst[i], dst[i+1], dst[i+2], dst[i+3] = row[i+2], row[i+1], row[i], 255
		}
	}
	return nil
}

// copyRect copies the pixels at from (the size of r) to r, as if through
// a temporary copy (the two may overlap).
func copyRect(img *image.RGBA, r image.Rectangle, from image.Point) {
	w := r.Dx() * 4
	rows := make([][]byte, r.Dy())
	for i := range rows {
		off := img.PixOffset(from.X, from.Y+i)
		rows[i] = append([]byte(nil), img.Pix[off:off+w]...)
	}
	for i, row := range rows {
		copy(img.Pix[img.PixOffset(r.Min.X, r.Min.Y+i):], row)
	}
}

// Screenshot takes a picture of the screen of the VNC server at the
// other end of conn, and closes conn. Cancelling ctx closes conn, which
// ends the exchange.
func Screenshot(ctx context.Context, conn net.Conn) (*image.RGBA, error) {
	stop := context.AfterFunc(ctx, func() { _ = conn.Close() })
	defer func() {
		stop()
		_ = conn.Close()
	}()
	c, err := Handshake(conn)
	if err == nil {
		var img *image.RGBA
		if img, err = c.Snapshot(); err == nil {
			return img, nil
		}
	}
	if ctx.Err() != nil {
		return nil, context.Cause(ctx)
	}
	return nil, err
}
