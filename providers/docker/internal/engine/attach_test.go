package engine

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/moby/moby/api/pkg/stdcopy"
)

// frame is one frame of a multiplexed stream (stream 1 is stdout, 2
// stderr), as the API reference describes it: a byte for the stream,
// three zero bytes, the payload's length (big-endian uint32), the payload.
func frame(stream byte, payload string) []byte {
	h := []byte{stream, 0, 0, 0, 0, 0, 0, 0}
	binary.BigEndian.PutUint32(h[4:], uint32(len(payload)))
	return append(h, payload...)
}

// attachHandler answers an attach as the engine does: it takes the
// connection over with status, writes some output, reads stdin to its end
// and echoes it on stdout, then closes the connection.
func attachHandler(t *testing.T, status int) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		if r.URL.Path != "/v1.41/containers/c1/attach" || q.Get("stream") != "1" || q.Get("stdin") != "1" ||
			q.Get("stdout") != "1" || q.Get("stderr") != "1" || r.Header.Get("Upgrade") != "tcp" || r.Header.Get("Connection") != "Upgrade" {
			answerJSON(w, http.StatusBadRequest, fmt.Sprintf(`{"message":"unexpected attach %s %q"}`, r.URL, r.Header))
			return
		}
		conn, rw, err := w.(http.Hijacker).Hijack()
		if err != nil {
			t.Error(err)
			return
		}
		defer conn.Close()
		head := "HTTP/1.1 101 UPGRADED\r\nContent-Type: application/vnd.docker.multiplexed-stream\r\nConnection: Upgrade\r\nUpgrade: tcp\r\n\r\n"
		if status == http.StatusOK {
			head = "HTTP/1.1 200 OK\r\nContent-Type: application/vnd.docker.raw-stream\r\n\r\n"
		}
		out := append([]byte(head), frame(1, "ready 2222\n")...)
		out = append(out, frame(2, "a warning\n")...)
		if _, err := conn.Write(out); err != nil {
			t.Error(err)
			return
		}
		stdin, err := io.ReadAll(rw.Reader) // to the client's CloseWrite
		if err != nil {
			t.Error(err)
			return
		}
		_, _ = conn.Write(frame(1, "got "+string(stdin)))
	}
}

func TestContainerAttach(t *testing.T) {
	for _, status := range []int{http.StatusSwitchingProtocols, http.StatusOK} {
		t.Run(http.StatusText(status), func(t *testing.T) {
			f := &fakeEngine{apiVersion: "1.41", handle: attachHandler(t, status)}
			c := f.serve(t, Config{})
			testAttach(t, c)
		})
	}
}

// testAttach attaches to c1 of an engine answering with attachHandler,
// writes stdin, ends it, and reads the output to its end.
func testAttach(t *testing.T, c *Client) {
	t.Helper()
	att, err := c.ContainerAttach(t.Context(), "c1", AttachOptions{Stdin: true, Stdout: true, Stderr: true})
	if err != nil {
		t.Fatal(err)
	}
	defer att.Close()
	if _, err := att.Conn.Write([]byte("the lease")); err != nil {
		t.Fatal(err)
	}
	if err := att.CloseWrite(); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	if _, err := stdcopy.StdCopy(&stdout, &stderr, att.Reader); err != nil {
		t.Fatal(err)
	}
	if got, want := stdout.String(), "ready 2222\ngot the lease"; got != want {
		t.Errorf("stdout %q, want %q", got, want)
	}
	if got, want := stderr.String(), "a warning\n"; got != want {
		t.Errorf("stderr %q, want %q", got, want)
	}
}

func TestContainerAttachRefused(t *testing.T) {
	f := &fakeEngine{apiVersion: "1.41", handle: func(w http.ResponseWriter, r *http.Request) {
		answerJSON(w, http.StatusNotFound, `{"message":"No such container: c9"}`)
	}}
	c := f.serve(t, Config{})
	_, err := c.ContainerAttach(t.Context(), "c9", AttachOptions{Stdout: true})
	if !IsNotFound(err) || !strings.Contains(err.Error(), "attach to container c9: No such container: c9") {
		t.Errorf("err = %v, want not found, naming the attach", err)
	}
}

// An attach the engine never answers ends with its context, and the
// engine sees the connection close.
func TestContainerAttachCancelled(t *testing.T) {
	entered, closed := make(chan struct{}), make(chan struct{})
	f := &fakeEngine{apiVersion: "1.41", handle: func(w http.ResponseWriter, r *http.Request) {
		conn, _, err := w.(http.Hijacker).Hijack()
		if err != nil {
			t.Error(err)
			return
		}
		defer conn.Close()
		close(entered)
		_, _ = io.Copy(io.Discard, conn) // until the client closes
		close(closed)
	}}
	c := f.serve(t, Config{})
	if _, err := c.Ping(t.Context()); err != nil { // settles the version first
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	errc := make(chan error, 1)
	go func() {
		_, err := c.ContainerAttach(ctx, "c1", AttachOptions{Stdout: true})
		errc <- err
	}()
	<-entered
	cancel()
	<-closed
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Errorf("err = %v, want context.Canceled", err)
	}
}
