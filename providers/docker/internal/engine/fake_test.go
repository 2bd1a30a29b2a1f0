package engine

import (
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"sync"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// fakeEngine is an Engine API server on a unix socket in a test's
// temporary directory. It answers GET /_ping with apiVersion and hands
// every other request to handle; it records the paths it was asked.
type fakeEngine struct {
	apiVersion string
	handle     http.HandlerFunc

	mu    sync.Mutex
	paths []string // method and path of every request, in order
	pings int
}

// serve starts f on a unix socket and returns a client of it, both closed
// when the test ends.
func (f *fakeEngine) serve(t *testing.T, cfg Config) *Client {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "docker.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(f)
	srv.Listener = l
	srv.Start()
	t.Cleanup(srv.Close)
	cfg.Host = "unix://" + sock
	return newClient(t, cfg)
}

func newClient(t *testing.T, cfg Config) *Client {
	t.Helper()
	c, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func (f *fakeEngine) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	f.paths = append(f.paths, r.Method+" "+r.URL.Path)
	if r.URL.Path == "/_ping" {
		f.pings++
	}
	f.mu.Unlock()
	if r.URL.Path == "/_ping" {
		if f.apiVersion != "" {
			w.Header().Set("API-Version", f.apiVersion)
		}
		w.Header().Set("OSType", "linux")
		_, _ = w.Write([]byte("OK"))
		return
	}
	if f.handle == nil {
		http.Error(w, `{"message":"page not found"}`, http.StatusNotFound)
		return
	}
	f.handle(w, r)
}

func (f *fakeEngine) requests() (paths []string, pings int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.paths...), f.pings
}

// answerJSON writes status and a JSON body.
func answerJSON(w http.ResponseWriter, status int, body string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write([]byte(body))
}
