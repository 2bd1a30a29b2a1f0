package engine

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestParseHost(t *testing.T) {
	for _, tc := range []struct {
		host    string
		want    *url.URL
		wantErr string
	}{
		{host: "unix:///var/run/docker.sock", want: &url.URL{Scheme: "unix", Host: "/var/run/docker.sock"}},
		{host: "npipe:////./pipe/docker_engine", want: &url.URL{Scheme: "npipe", Host: "//./pipe/docker_engine"}},
		{host: "tcp://127.0.0.1:2375", want: &url.URL{Scheme: "tcp", Host: "127.0.0.1:2375"}},
		{host: "tcp://localhost", want: &url.URL{Scheme: "tcp", Host: "localhost"}},
		{host: "tcp://[::1]:2376/", want: &url.URL{Scheme: "tcp", Host: "[::1]:2376"}},
		{host: "http://localhost:2375/engine/", want: &url.URL{Scheme: "http", Host: "localhost:2375", Path: "/engine"}},
		{host: "https://docker.example:2376", want: &url.URL{Scheme: "https", Host: "docker.example:2376"}},
		{host: "ssh://me@build-server", wantErr: `scheme "ssh" is not supported: set DOCKER_HOST`},
		{host: "fd://", wantErr: `scheme "fd" is not supported`},
		{host: "/var/run/docker.sock", wantErr: "want scheme://address"},
		{host: "", wantErr: "want scheme://address"},
		{host: "unix://", wantErr: "the unix address is empty"},
		{host: "tcp://", wantErr: "no host name"},
		{host: "tcp://:2375", wantErr: "no host name"},
		{host: "tcp://user:pw@localhost:2375", wantErr: "want only host[:port]"},
		{host: "tcp://localhost:2375?x=1", wantErr: "want only host[:port]"},
	} {
		got, err := ParseHost(tc.host)
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) || !strings.Contains(err.Error(), tc.host) {
				t.Errorf("ParseHost(%q) = %v, %v; want an error naming the host and containing %q", tc.host, got, err, tc.wantErr)
			}
			continue
		}
		if err != nil {
			t.Errorf("ParseHost(%q): %v", tc.host, err)
			continue
		}
		if diff := cmp.Diff(tc.want, got); diff != "" {
			t.Errorf("ParseHost(%q) (-want +got):\n%s", tc.host, diff)
		}
	}
}

func TestConfigFromEnv(t *testing.T) {
	home := t.TempDir()
	t.Setenv("HOME", home)
	t.Setenv("USERPROFILE", home)
	for _, tc := range []struct {
		name string
		env  map[string]string
		want Config
	}{
		{name: "nothing set", env: nil, want: Config{}},
		{name: "host and version", env: map[string]string{"DOCKER_HOST": "tcp://127.0.0.1:2375", "DOCKER_API_VERSION": "1.43"},
			want: Config{Host: "tcp://127.0.0.1:2375", APIVersion: "1.43"}},
		{name: "verify with certificates", env: map[string]string{"DOCKER_TLS_VERIFY": "1", "DOCKER_CERT_PATH": "/certs"},
			want: Config{CertPath: "/certs", TLSVerify: true}},
		{name: "verify with the default certificates", env: map[string]string{"DOCKER_TLS_VERIFY": "1"},
			want: Config{CertPath: filepath.Join(home, ".docker"), TLSVerify: true}},
		{name: "certificates without verifying", env: map[string]string{"DOCKER_CERT_PATH": "/certs"},
			want: Config{CertPath: "/certs"}},
	} {
		got := ConfigFromEnv(func(k string) string { return tc.env[k] })
		if diff := cmp.Diff(tc.want, got); diff != "" {
			t.Errorf("%s: ConfigFromEnv (-want +got):\n%s", tc.name, diff)
		}
	}
}

func TestNewRejects(t *testing.T) {
	for _, tc := range []struct {
		cfg     Config
		wantErr string
	}{
		{Config{Host: "ssh://build-server"}, "DOCKER_HOST"},
		{Config{APIVersion: "latest"}, `"latest" (DOCKER_API_VERSION)`},
		{Config{Host: "tcp://127.0.0.1:2376", CertPath: t.TempDir(), TLSVerify: true}, "ca.pem"},
	} {
		if _, err := New(tc.cfg); err == nil || !strings.Contains(err.Error(), tc.wantErr) {
			t.Errorf("New(%+v): err = %v, want one containing %q", tc.cfg, err, tc.wantErr)
		}
	}
}

func TestDefaultHost(t *testing.T) {
	c := newClient(t, Config{})
	if c.Host() != DefaultHost {
		t.Errorf("Host() = %q, want %q", c.Host(), DefaultHost)
	}
}

// The client asks the engine its version once, on its first request, and
// speaks the older of the engine's and its own.
func TestVersionNegotiation(t *testing.T) {
	for _, tc := range []struct {
		name      string
		server    string // the engine's API-Version header
		fixed     string // Config.APIVersion
		wantPath  string
		wantPings int
	}{
		{name: "older engine", server: "1.41", wantPath: "/v1.41/version", wantPings: 1},
		{name: "newer engine", server: "1.99", wantPath: "/v" + MaxAPIVersion + "/version", wantPings: 1},
		{name: "same engine", server: MaxAPIVersion, wantPath: "/v" + MaxAPIVersion + "/version", wantPings: 1},
		{name: "fixed version", server: "1.41", fixed: "1.44", wantPath: "/v1.44/version", wantPings: 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := &fakeEngine{apiVersion: tc.server, handle: func(w http.ResponseWriter, r *http.Request) {
				answerJSON(w, http.StatusOK, `{"Version":"28.0.1","ApiVersion":"`+tc.server+`","Os":"linux","Arch":"amd64"}`)
			}}
			c := f.serve(t, Config{APIVersion: tc.fixed})
			for range 3 {
				v, err := c.ServerVersion(t.Context())
				if err != nil {
					t.Fatal(err)
				}
				want := Version{Version: "28.0.1", APIVersion: tc.server, Os: "linux", Arch: "amd64"}
				if diff := cmp.Diff(want, v); diff != "" {
					t.Fatalf("ServerVersion (-want +got):\n%s", diff)
				}
			}
			paths, pings := f.requests()
			if pings != tc.wantPings {
				t.Errorf("%d pings, want %d (requests %q)", pings, tc.wantPings, paths)
			}
			if last := paths[len(paths)-1]; last != "GET "+tc.wantPath {
				t.Errorf("last request %q, want GET %s", last, tc.wantPath)
			}
		})
	}
}

// Ping settles the version too, so that a ping and a request cost two
// round trips, not three.
func TestPingSettlesTheVersion(t *testing.T) {
	f := &fakeEngine{apiVersion: "1.45", handle: func(w http.ResponseWriter, r *http.Request) {
		answerJSON(w, http.StatusOK, `{"Os":"linux"}`)
	}}
	c := f.serve(t, Config{})
	p, err := c.Ping(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(Ping{APIVersion: "1.45", OSType: "linux"}, p); diff != "" {
		t.Errorf("Ping (-want +got):\n%s", diff)
	}
	if _, err := c.ServerVersion(t.Context()); err != nil {
		t.Fatal(err)
	}
	paths, _ := f.requests()
	if diff := cmp.Diff([]string{"GET /_ping", "GET /v1.45/version"}, paths); diff != "" {
		t.Errorf("requests (-want +got):\n%s", diff)
	}
}

func TestTooOldEngine(t *testing.T) {
	for _, server := range []string{"1.30", ""} {
		f := &fakeEngine{apiVersion: server}
		c := f.serve(t, Config{})
		_, err := c.ServerVersion(t.Context())
		if err == nil || !strings.Contains(err.Error(), "older than "+MinAPIVersion) {
			t.Errorf("engine of API %q: err = %v, want it refused as older than %s", server, err, MinAPIVersion)
		}
	}
}

// An error answer becomes an error naming what was asked, with the
// engine's message and a kind callers can test.
func TestErrorAnswers(t *testing.T) {
	type kinds struct{ NotFound, Conflict, Denied, Exhausted, Unavailable bool }
	for _, tc := range []struct {
		status  int
		body    string
		want    kinds
		wantMsg string
	}{
		{http.StatusNotFound, `{"message":"No such container: abc"}`, kinds{NotFound: true}, "No such container: abc"},
		{http.StatusConflict, `{"message":"removal of container abc is already in progress"}`, kinds{Conflict: true}, "already in progress"},
		{http.StatusForbidden, `{"message":"authorization denied by plugin"}`, kinds{Denied: true}, "authorization denied"},
		{http.StatusUnauthorized, `{"message":"who are you"}`, kinds{Denied: true}, "who are you"},
		{http.StatusTooManyRequests, `{"message":"slow down"}`, kinds{Exhausted: true}, "slow down"},
		{http.StatusServiceUnavailable, `{"message":"engine shutting down"}`, kinds{Unavailable: true}, "engine shutting down"},
		{http.StatusInternalServerError, "plain text trouble\n", kinds{}, "plain text trouble"},
		{http.StatusBadRequest, "", kinds{}, "Bad Request"},
	} {
		f := &fakeEngine{apiVersion: "1.41", handle: func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(tc.status)
			_, _ = w.Write([]byte(tc.body))
		}}
		c := f.serve(t, Config{})
		err := c.ContainerRemove(t.Context(), "abc", RemoveOptions{Force: true})
		if err == nil {
			t.Errorf("status %d: no error", tc.status)
			continue
		}
		got := kinds{IsNotFound(err), IsConflict(err), IsDenied(err), IsExhausted(err), IsUnavailable(err)}
		if diff := cmp.Diff(tc.want, got); diff != "" {
			t.Errorf("status %d: kinds (-want +got):\n%s", tc.status, diff)
		}
		if !strings.HasPrefix(err.Error(), "remove container abc: ") || !strings.Contains(err.Error(), tc.wantMsg) {
			t.Errorf("status %d: err = %q, want it to name the removal and say %q", tc.status, err, tc.wantMsg)
		}
		var e *Error
		if !errors.As(err, &e) || e.Status != tc.status {
			t.Errorf("status %d: err = %#v, want an *Error of that status", tc.status, err)
		}
	}
}

// An engine that is not there is unavailable, and the error names where
// it was looked for.
func TestNoEngine(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "absent.sock")
	c := newClient(t, Config{Host: "unix://" + sock})
	_, err := c.ContainerList(t.Context(), ListOptions{})
	var ce *ConnectError
	if !IsUnavailable(err) || !errors.As(err, &ce) || !strings.Contains(err.Error(), "unix://"+sock) {
		t.Errorf("err = %v, want a ConnectError naming unix://%s", err, sock)
	}
	if !strings.HasPrefix(err.Error(), "list containers: ") {
		t.Errorf("err = %q, want it to begin with what was asked", err)
	}
}

// Cancelling a request's context ends the request: the engine sees its
// connection close, and the caller gets the context's error.
func TestCancelClosesTheRequest(t *testing.T) {
	entered, closed := make(chan struct{}), make(chan struct{})
	f := &fakeEngine{apiVersion: "1.41", handle: func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusOK)
		w.(http.Flusher).Flush()
		close(entered)
		<-r.Context().Done()
		close(closed)
	}}
	c := f.serve(t, Config{})
	ctx, cancel := context.WithCancel(t.Context())
	errc := make(chan error, 1)
	go func() {
		_, err := c.ContainerWait(ctx, "abc", WaitRemoved)
		errc <- err
	}()
	<-entered
	cancel()
	<-closed
	if err := <-errc; !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "wait for container abc") {
		t.Errorf("err = %v, want context.Canceled, naming the wait", err)
	}
}

// A request that runs out of time is unavailable (worth another try).
func TestDeadlineIsUnavailable(t *testing.T) {
	f := &fakeEngine{apiVersion: "1.41"}
	c := f.serve(t, Config{})
	ctx, cancel := context.WithDeadline(t.Context(), time.Now().Add(-time.Second))
	defer cancel()
	_, err := c.ServerVersion(ctx)
	if !errors.Is(err, context.DeadlineExceeded) || !IsUnavailable(err) {
		t.Errorf("err = %v, want DeadlineExceeded, unavailable", err)
	}
}
