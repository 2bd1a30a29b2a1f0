package crabbox_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"testing"

	"github.com/crabbox-dev/crabbox"
	"github.com/crabbox-dev/crabbox/run"
)

// boxWebServer starts a static HTTP server on the box, through the lease,
// serving index.html ("hello from the box") on loopback, and returns its
// port. It runs python3's http.server; on a machine without python3 (the
// local provider's box is this machine) a loopback server of the test
// stands in. The server is stopped when the test ends.
func boxWebServer(t *testing.T, box *crabbox.Lease) int {
	t.Helper()
	if _, err := exec.LookPath("python3"); err != nil {
		t.Logf("no python3: serving from the test process instead (%v)", err)
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			io.WriteString(w, "hello from the box\n")
		})}
		go srv.Serve(ln)
		t.Cleanup(func() { srv.Close() })
		return ln.Addr().(*net.TCPAddr).Port
	}
	ctx, cancel := context.WithCancel(context.Background())
	pr, pw := io.Pipe()
	var wg sync.WaitGroup
	wg.Go(func() {
		_, err := box.Exec(ctx, run.Command{
			Shell:  `mkdir -p site && echo 'hello from the box' >site/index.html && exec python3 -u -m http.server 0 --bind 127.0.0.1 --directory site`,
			Stdout: pw, Stderr: io.Discard,
		})
		pw.CloseWithError(fmt.Errorf("the web server on the box ended: %v", err))
	})
	t.Cleanup(func() {
		cancel()
		pr.Close()
		wg.Wait()
	})
	line, err := bufio.NewReader(pr).ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	go io.Copy(io.Discard, pr) // the server's later output
	m := regexp.MustCompile(`port (\d+)`).FindStringSubmatch(line)
	if m == nil {
		t.Fatalf("web server on the box said %q, no port", line)
	}
	var port int
	fmt.Sscan(m[1], &port)
	return port
}

// get fetches url and returns its body; an error for anything but 200.
func get(url string) (string, error) {
	resp, err := http.Get(url)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", err
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("%s: %s", resp.Status, b)
	}
	return string(b), nil
}

func acquireLocal(t *testing.T, opts ...crabbox.Option) (*crabbox.Client, *crabbox.Lease) {
	t.Helper()
	c := newClient(t, t.TempDir(), opts...)
	box, err := c.Acquire(context.Background(), crabbox.AcquireOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { box.Release(context.Background()) })
	return c, box
}

// An HTTP server on the box answers through the forward, on the port it
// picked, for several requests (each a connection of its own).
func TestForwardReachesServerOnBox(t *testing.T) {
	_, box := acquireLocal(t)
	port := boxWebServer(t, box)
	ctx := context.Background()
	f, err := box.Forward(ctx, crabbox.ForwardSpec{LocalAddr: "127.0.0.1:0", RemotePort: port})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if want := fmt.Sprintf("127.0.0.1:%d", port); f.Remote() != want {
		t.Errorf("Remote = %q, want %q", f.Remote(), want)
	}
	for range 2 {
		body, err := get("http://" + f.Addr().String() + "/")
		if err != nil || body != "hello from the box\n" {
			t.Fatalf("GET through the forward = %q, %v", body, err)
		}
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if err := f.Wait(); err != nil {
		t.Errorf("Wait after Close = %v, want nil", err)
	}
	if c, err := net.Dial("tcp", f.Addr().String()); err == nil {
		c.Close()
		t.Error("the forward still listens after Close")
	}
}

// syncLog is a log destination safe for concurrent writes.
type syncLog struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncLog) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncLog) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// A port nobody listens on, on the box: each connection is closed at
// once and the failure logged, and the forward keeps accepting.
func TestForwardToClosedPortKeepsServing(t *testing.T) {
	var logs syncLog
	_, box := acquireLocal(t, crabbox.WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	f, err := box.Forward(context.Background(), crabbox.ForwardSpec{LocalAddr: "127.0.0.1:0", RemotePort: closed})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for i := range 2 {
		c, err := net.Dial("tcp", f.Addr().String())
		if err != nil {
			t.Fatalf("connection %d: %v", i, err)
		}
		n, err := c.Read(make([]byte, 1))
		c.Close()
		if err == nil {
			t.Errorf("connection %d read %d bytes from a closed port", i, n)
		}
	}
	if got := logs.String(); !strings.Contains(got, fmt.Sprintf("127.0.0.1:%d on the box", closed)) {
		t.Errorf("log does not name the failed connection:\n%s", got)
	}
}

// Ending the forward's context closes the connections open through it;
// closing the lease ends a forward with an error saying so.
func TestForwardEnds(t *testing.T) {
	_, box := acquireLocal(t)
	port := boxWebServer(t, box)
	ctx, cancel := context.WithCancel(context.Background())
	f, err := box.Forward(ctx, crabbox.ForwardSpec{LocalAddr: "127.0.0.1:0", RemotePort: port})
	if err != nil {
		t.Fatal(err)
	}
	c, err := net.Dial("tcp", f.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// A request in flight: the connection is joined to the box.
	if _, err := io.WriteString(c, "GET / HTTP/1.1\r\nHost: box\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	if _, err := bufio.NewReader(c).ReadString('\n'); err != nil {
		t.Fatal(err)
	}
	cancel()
	if err := f.Wait(); !errors.Is(err, context.Canceled) {
		t.Errorf("Wait = %v, want context.Canceled", err)
	}
	if _, err := io.ReadAll(c); err != nil && !errors.Is(err, net.ErrClosed) {
		t.Logf("read after the end: %v", err)
	}

	g, err := box.Forward(context.Background(), crabbox.ForwardSpec{LocalAddr: "127.0.0.1:0", RemotePort: port})
	if err != nil {
		t.Fatal(err)
	}
	box.Close()
	if err := g.Wait(); err == nil || !strings.Contains(err.Error(), "connection to lease") {
		t.Errorf("Wait after the lease closed = %v, want the connection's end", err)
	}
}

func TestForwardRefusesBadSpecs(t *testing.T) {
	_, box := acquireLocal(t)
	for _, tc := range []struct {
		spec crabbox.ForwardSpec
		want string
	}{
		{crabbox.ForwardSpec{}, "remote port 0"},
		{crabbox.ForwardSpec{RemotePort: 65536}, "remote port 65536"},
		{crabbox.ForwardSpec{RemotePort: 80, LocalAddr: "8080"}, `local address "8080"`},
		{crabbox.ForwardSpec{RemotePort: 80, LocalAddr: "127.0.0.1:x"}, `port "x"`},
		{crabbox.ForwardSpec{RemotePort: 80, LocalAddr: ":0"}, "not a loopback address"},
		{crabbox.ForwardSpec{RemotePort: 80, LocalAddr: "0.0.0.0:0"}, "not a loopback address"},
	} {
		f, err := box.Forward(context.Background(), tc.spec)
		if err == nil {
			f.Close()
			t.Errorf("Forward(%+v) succeeded", tc.spec)
		} else if !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Forward(%+v) = %v, want it to say %q", tc.spec, err, tc.want)
		}
	}
	// Asked for, any interface is allowed.
	f, err := box.Forward(context.Background(), crabbox.ForwardSpec{RemotePort: 80, LocalAddr: "0.0.0.0:0", AnyInterface: true})
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
}
