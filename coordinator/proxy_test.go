package coordinator_test

import (
	"bufio"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"

	"golang.org/x/crypto/ssh"

	"github.com/crabbox-dev/crabbox/coordinator/api"
	"github.com/crabbox-dev/crabbox/coordinator/store"
	"github.com/crabbox-dev/crabbox/internal/handover"
)

// previewLease makes a lease of alice's on the local provider and
// connects to its box with the lease key; with access it puts the
// coordinator's access key on the box as the lease owner's library does
// (here as the box's only key: the connection made stays open).
func previewLease(t *testing.T, e *env, alice string, access bool) (api.Lease, *ssh.Client) {
	t.Helper()
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	sshPub, _ := ssh.NewPublicKey(pub)
	signer, _ := ssh.NewSignerFromKey(priv)
	req := leaseReq(t)
	req.Provider, req.SSHPublicKey = "local", string(ssh.MarshalAuthorizedKey(sshPub))
	l := e.create(alice, req)
	hostKey, _, _, _, err := ssh.ParseAuthorizedKey([]byte(l.SSHHostKey))
	if err != nil {
		t.Fatal(err)
	}
	client, err := ssh.Dial("tcp", net.JoinHostPort(l.Host, l.SSHPort), &ssh.ClientConfig{
		User: l.SSHUser, Auth: []ssh.AuthMethod{ssh.PublicKeys(signer)}, HostKeyCallback: ssh.FixedHostKey(hostKey),
	})
	if err != nil {
		t.Fatalf("dial box: %v", err)
	}
	t.Cleanup(func() { client.Close() })
	if access {
		key, err := e.srv.AccessKeyOf(l.ID)
		if err != nil {
			t.Fatal(err)
		}
		if err := handover.SetKey(t.Context(), client, key.PublicKey()); err != nil {
			t.Fatalf("install the access key: %v", err)
		}
	}
	return l, client
}

// boxWebServer starts python3's http.server on the box through the
// lease's connection, serving index.html ("hello from the box") on
// loopback, and returns its port; without python3 (the local provider's
// box is this machine) a loopback server of the test stands in.
func boxWebServer(t *testing.T, client *ssh.Client) int {
	t.Helper()
	if _, err := exec.LookPath("python3"); err != nil {
		t.Logf("no python3: serving from the test process instead (%v)", err)
		return loopbackServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			io.WriteString(w, "hello from the box\n")
		}))
	}
	sess, err := client.NewSession()
	if err != nil {
		t.Fatal(err)
	}
	out, err := sess.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := sess.Start(`mkdir -p site && echo 'hello from the box' >site/index.html && exec python3 -u -m http.server 0 --bind 127.0.0.1 --directory site`); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		sess.Signal(ssh.SIGTERM)
		sess.Close()
	})
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatalf("web server on the box: %v", err)
	}
	go io.Copy(io.Discard, out)
	m := regexp.MustCompile(`port (\d+)`).FindStringSubmatch(line)
	if m == nil {
		t.Fatalf("web server on the box said %q, no port", line)
	}
	port, _ := strconv.Atoi(m[1])
	return port
}

// loopbackServer serves h on loopback (on the local provider's box, which
// is this machine) until the test ends, and returns its port.
func loopbackServer(t *testing.T, h http.Handler) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: h}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return ln.Addr().(*net.TCPAddr).Port
}

// proxyGet sends a GET for path with token and extra headers, not
// following redirects.
func (e *env) proxyGet(path, token string, header http.Header) *http.Response {
	e.t.Helper()
	req, err := http.NewRequest("GET", e.url+path, nil)
	if err != nil {
		e.t.Fatal(err)
	}
	for k, vs := range header {
		req.Header[k] = vs
	}
	req.Header.Set("Authorization", "Bearer "+token)
	c := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := c.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { resp.Body.Close() })
	return resp
}

func body(t *testing.T, resp *http.Response) string {
	t.Helper()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func proxyPath(id string, port int, rest string) string {
	return fmt.Sprintf("/v1/leases/%s/proxy/%d/%s", id, port, rest)
}

// A web server started on the box answers through the preview URL, with
// the sandbox policy; the port's own path redirects to its directory.
func TestPreviewServesBoxPort(t *testing.T) {
	eachStore(t, func(t *testing.T, open opener) {
		e, _ := localEnv(t, open, nil)
		t.Cleanup(e.srv.CloseControl)
		alice := e.token("alice", "acme")
		l, client := previewLease(t, e, alice, true)
		port := boxWebServer(t, client)

		for range 2 { // the second request reuses the connection
			resp := e.proxyGet(proxyPath(l.ID, port, ""), alice, nil)
			if got := body(t, resp); resp.StatusCode != http.StatusOK || got != "hello from the box\n" {
				t.Fatalf("preview: %d %q", resp.StatusCode, got)
			}
			if csp := resp.Header.Get("Content-Security-Policy"); !strings.HasPrefix(csp, "sandbox allow-scripts allow-forms") || strings.Contains(csp, "allow-same-origin") {
				t.Errorf("preview CSP %q", csp)
			}
		}
		if n := e.srv.CachedPreviews(); n != 1 {
			t.Errorf("cached preview connections = %d, want 1", n)
		}
		resp := e.proxyGet(fmt.Sprintf("/v1/leases/%s/proxy/%d?x=1", l.ID, port), alice, nil)
		if loc := resp.Header.Get("Location"); resp.StatusCode != http.StatusSeeOther || loc != fmt.Sprintf("/v1/leases/%s/proxy/%d/?x=1", l.ID, port) {
			t.Errorf("port without a slash: %d to %q", resp.StatusCode, loc)
		}
	})
}

// The box sees neither the caller's token nor its cookies, gets the path
// and query, and cannot set cookies on the coordinator's origin.
func TestPreviewKeepsCredentialsFromTheBox(t *testing.T) {
	eachStore(t, func(t *testing.T, open opener) { previewCredentials(t, open) })
}

func previewCredentials(t *testing.T, open opener) {
	e, _ := localEnv(t, open, nil)
	t.Cleanup(e.srv.CloseControl)
	alice := e.token("alice", "acme")
	l, _ := previewLease(t, e, alice, true)
	port := loopbackServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.SetCookie(w, &http.Cookie{Name: "box", Value: "1", Path: "/"})
		fmt.Fprintf(w, "%s %s?%s auth=%q cookie=%q host=%s", r.Method, r.URL.Path, r.URL.RawQuery, r.Header.Get("Authorization"), r.Header.Get("Cookie"), r.Host)
	}))
	resp := e.proxyGet(proxyPath(l.ID, port, "a/b.txt?q=1&r=%2F"), alice, http.Header{"Cookie": {"crabbox_session=secret; other=x"}})
	got := body(t, resp)
	want := fmt.Sprintf(`GET /a/b.txt?q=1&r=%%2F auth="" cookie="" host=127.0.0.1:%d`, port)
	if resp.StatusCode != http.StatusOK || got != want {
		t.Errorf("preview: %d %q, want %q", resp.StatusCode, got, want)
	}
	if c := resp.Header.Values("Set-Cookie"); len(c) != 0 {
		t.Errorf("the box set cookies on the coordinator's origin: %q", c)
	}
}

// Who may preview, and what the preview answers when it cannot.
func TestPreviewErrors(t *testing.T) {
	eachStore(t, func(t *testing.T, open opener) {
		e, _ := localEnv(t, open, nil)
		t.Cleanup(e.srv.CloseControl)
		alice, bob, carol := e.token("alice", "acme"), e.token("bob", "acme"), e.token("carol", "acme")
		l, client := previewLease(t, e, alice, true)
		port := boxWebServer(t, client)
		noKey, _ := previewLease(t, e, alice, false)

		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		closed := ln.Addr().(*net.TCPAddr).Port
		ln.Close()

		if _, err := e.store.SetLeaseShare(t.Context(), l.ID, store.LeaseShare{Users: map[string]string{"bob": "read", "carol": "use"}}, e.clock.Now()); err != nil {
			t.Fatal(err)
		}
		for _, tc := range []struct {
			name, path, token string
			status            int
			says              string
		}{
			{"port 0", proxyPath(l.ID, 0, ""), alice, http.StatusBadRequest, `port "0"`},
			{"port too big", proxyPath(l.ID, 65536, ""), alice, http.StatusBadRequest, `port "65536"`},
			{"port not a number", "/v1/leases/" + l.ID + "/proxy/http/", alice, http.StatusBadRequest, `port "http"`},
			{"no token", proxyPath(l.ID, port, ""), "", http.StatusUnauthorized, "bearer token"},
			{"read sharer", proxyPath(l.ID, port, ""), bob, http.StatusForbidden, "needs use"},
			{"stranger", proxyPath(noKey.ID, port, ""), bob, http.StatusNotFound, ""},
			{"nothing listens", proxyPath(l.ID, closed, ""), alice, http.StatusBadGateway, fmt.Sprintf("port %d on the box did not answer", closed)},
			{"box without the access key", proxyPath(noKey.ID, port, ""), alice, http.StatusBadGateway, "does not accept the coordinator's access key"},
			{"use sharer", proxyPath(l.ID, port, ""), carol, http.StatusOK, "hello from the box"},
		} {
			req, err := http.NewRequest("GET", e.url+tc.path, nil)
			if err != nil {
				t.Fatal(err)
			}
			if tc.token != "" {
				req.Header.Set("Authorization", "Bearer "+tc.token)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			got := body(t, resp)
			resp.Body.Close()
			var apiErr api.Error
			if json.Unmarshal([]byte(got), &apiErr) == nil && apiErr.Message != "" {
				got = apiErr.Message
			}
			if resp.StatusCode != tc.status || !strings.Contains(got, tc.says) {
				t.Errorf("%s: %d %q, want %d saying %q", tc.name, resp.StatusCode, got, tc.status, tc.says)
			}
		}
	})
}

// A preview stream open when the lease is released, or when its sharer's
// share is revoked, ends at once; later requests are refused.
func TestPreviewRevoked(t *testing.T) {
	eachStore(t, func(t *testing.T, open opener) {
		e, _ := localEnv(t, open, nil)
		t.Cleanup(e.srv.CloseControl)
		alice, carol := e.token("alice", "acme"), e.token("carol", "acme")
		l, _ := previewLease(t, e, alice, true)
		var wg sync.WaitGroup
		t.Cleanup(wg.Wait)
		port := loopbackServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			wg.Add(1)
			defer wg.Done()
			io.WriteString(w, "started\n")
			w.(http.Flusher).Flush()
			<-r.Context().Done() // streams until the client is gone
		}))
		stream := func(token string) *bufio.Reader {
			resp := e.proxyGet(proxyPath(l.ID, port, "events"), token, nil)
			rd := bufio.NewReader(resp.Body)
			if line, err := rd.ReadString('\n'); err != nil || line != "started\n" {
				t.Fatalf("stream: %d %q %v", resp.StatusCode, line, err)
			}
			return rd
		}
		ended := func(who string, rd *bufio.Reader) {
			t.Helper()
			if rest, err := io.ReadAll(rd); err == nil && len(rest) != 0 {
				t.Errorf("%s's stream went on: %q", who, rest)
			}
		}

		if _, err := e.store.SetLeaseShare(t.Context(), l.ID, store.LeaseShare{Users: map[string]string{"carol": "use"}}, e.clock.Now()); err != nil {
			t.Fatal(err)
		}
		carols := stream(carol)
		e.do("PUT", leasePath(l.ID, "/share"), alice, api.LeaseShare{Users: map[string]api.ShareRole{"carol": api.ShareRead}}, http.StatusOK, nil)
		ended("carol", carols)

		alices := stream(alice)
		e.do("POST", leasePath(l.ID, "/release"), alice, nil, http.StatusOK, nil)
		ended("alice", alices)
		if resp := e.proxyGet(proxyPath(l.ID, port, ""), alice, nil); resp.StatusCode != http.StatusConflict {
			t.Errorf("preview of a released lease: %d %q", resp.StatusCode, body(t, resp))
		}
	})
}

// An upgraded connection (a websocket) passes through both ways, and
// ends when the lease is released.
func TestPreviewUpgrade(t *testing.T) {
	eachStore(t, func(t *testing.T, open opener) { previewUpgrade(t, open) })
}

func previewUpgrade(t *testing.T, open opener) {
	e, _ := localEnv(t, open, nil)
	t.Cleanup(e.srv.CloseControl)
	alice := e.token("alice", "acme")
	l, _ := previewLease(t, e, alice, true)
	var wg sync.WaitGroup
	t.Cleanup(wg.Wait)
	port := loopbackServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Upgrade") != "echo" {
			http.Error(w, "want Upgrade: echo", http.StatusBadRequest)
			return
		}
		conn, rw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		wg.Add(1)
		defer wg.Done()
		defer conn.Close()
		rw.WriteString("HTTP/1.1 101 Switching Protocols\r\nUpgrade: echo\r\nConnection: Upgrade\r\n\r\n")
		rw.Flush()
		io.Copy(conn, rw)
	}))
	conn, err := net.Dial("tcp", strings.TrimPrefix(e.url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "GET %s HTTP/1.1\r\nHost: coordinator\r\nAuthorization: Bearer %s\r\nUpgrade: echo\r\nConnection: Upgrade\r\n\r\n", proxyPath(l.ID, port, "ws"), alice)
	rd := bufio.NewReader(conn)
	resp, err := http.ReadResponse(rd, nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("upgrade: %d %q", resp.StatusCode, body(t, resp))
	}
	io.WriteString(conn, "ping\n")
	if line, err := rd.ReadString('\n'); err != nil || line != "ping\n" {
		t.Fatalf("echo through the upgrade: %q %v", line, err)
	}
	e.do("POST", leasePath(l.ID, "/release"), alice, nil, http.StatusOK, nil)
	if rest, err := io.ReadAll(rd); err == nil && len(rest) != 0 {
		t.Errorf("the upgraded connection went on: %q", rest)
	}
}
