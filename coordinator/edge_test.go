package coordinator_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/crabbox-dev/crabbox/coordinator"
	"github.com/crabbox-dev/crabbox/coordinator/api"
	"github.com/crabbox-dev/crabbox/coordinator/store"
	"github.com/crabbox-dev/crabbox/coordinator/store/sqlite"
)

// metricSeries counts the coordinator's HTTP metric series on /metrics.
func metricSeries(t *testing.T, e *env) int {
	t.Helper()
	status, raw := e.call("GET", "/metrics", adminToken, nil)
	if status != http.StatusOK {
		t.Fatalf("GET /metrics: %d %s", status, raw)
	}
	n := 0
	for line := range strings.Lines(string(raw)) {
		if strings.HasPrefix(line, "crabbox_coordinator_http_") {
			n++
		}
	}
	return n
}

// TestMetricsLabelsAreBounded sends thousands of made-up methods and
// paths, authenticated or not: the number of metric series does not grow,
// because unknown methods and routes count as "other".
func TestMetricsLabelsAreBounded(t *testing.T) {
	{
		e := newEnv(t, openSQLite(t), clockwork.NewFakeClockAt(start), newFake())
		send := func(i int) {
			for _, tok := range []string{"", adminToken} {
				req, err := http.NewRequest(fmt.Sprintf("M%dX", i), e.url+fmt.Sprintf("/v1/made-up/%d?x=%d", i, i), nil)
				if err != nil {
					t.Fatal(err)
				}
				if tok != "" {
					req.Header.Set("Authorization", "Bearer "+tok)
				}
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusNotFound {
					t.Fatalf("made-up request %d: status %d", i, resp.StatusCode)
				}
			}
			// A known route with a made-up method, and an unknown path
			// with a known one.
			e.call(fmt.Sprintf("PURGE%d", i), "/v1/leases", adminToken, nil)
			e.call("GET", fmt.Sprintf("/v1/leases/x/%d", i), adminToken, nil)
		}
		send(0)
		metricSeries(t, e) // the scrape's own series exist from here on
		before := metricSeries(t, e)
		for i := 1; i <= 1000; i++ {
			send(i)
		}
		if after := metricSeries(t, e); after != before {
			t.Errorf("metric series grew from %d to %d with made-up methods and paths", before, after)
		}
		_, raw := e.call("GET", "/metrics", adminToken, nil)
		if strings.Contains(string(raw), "M17X") || strings.Contains(string(raw), "made-up") {
			t.Errorf("request input reached a metric label")
		}
	}
}

func openSQLite(t *testing.T) store.Store {
	t.Helper()
	s, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "coordinator.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// TestTextValidationAtTheEdge replays requests carrying text no store
// takes (NUL bytes, invalid UTF-8, overlong values): every one is a 400
// invalid_request on both stores (PostgreSQL used to answer 500), and
// nothing changes.
func TestTextValidationAtTheEdge(t *testing.T) {
	eachStore(t, func(t *testing.T, open opener) {
		e := simple(t, open)
		alice := e.token("alice", "acme")
		l := e.create(alice, leaseReq(t))
		var run api.RunResponse
		e.do("POST", "/v1/runs", alice, `{"leaseID":"`+l.ID+`","provider":"fake","command":["go","test"]}`, http.StatusCreated, &run)
		events := "/v1/runs/" + run.Run.ID + "/events"
		long := strings.Repeat("o", 2000)
		for _, c := range []struct{ method, path, body string }{
			{"GET", "/v1/leases?provider=a%00b", ""},
			{"GET", "/v1/leases?owner=%ff%fe", ""},
			{"GET", "/v1/leases?owner=" + long, ""},
			{"GET", "/v1/leases?st%00ate=active", ""},
			{"GET", "/v1/runs?leaseID=%ff", ""},
			{"GET", "/v1/runs?leaseID=cbx_%00", ""},
			{"GET", "/v1/runs/" + run.Run.ID + "/events?after=%00", ""},
			{"GET", "/v1/usage?month=2026-05%00", ""},
			{"GET", "/v1/leases/a%00b", ""},
			{"GET", "/v1/leases/%ff", ""},
			{"GET", "/v1/admin/leases?org=%00", ""},
			{"POST", events, `{"type":"output","stream":"stdout","message":"a\u0000b"}`},
			{"POST", events, `{"type":"lease.created","data":"{\"leaseID\":\"\u0000\"}"}`},
			{"POST", events, `{"type":"phase","phase":"sync\u0000"}`},
			{"POST", "/v1/runs", `{"provider":"fake","command":["echo","a\u0000b"]}`},
			{"POST", "/v1/runs", `{"provider":"fake","command":["echo"],"label":"x\u0000"}`},
			{"PUT", leasePath("static-host-1", "/registration"), `{"provider":"ssh","host":"10.0.0.1\u0000"}`},
			{"POST", "/v1/leases", `{"sshPublicKey":"` + publicKey(t) + `","labels":{"a\u0000":"b"}}`},
			{"POST", leasePath(l.ID, "/heartbeat"), `{"expectedProvider":"fake\u0000"}`},
		} {
			got := e.fail(c.method, c.path, alice, nilIfEmpty(c.body), http.StatusBadRequest, api.CodeInvalidRequest)
			if len(got.Message) > 300 {
				t.Errorf("%s %s: message of %d bytes", c.method, c.path, len(got.Message))
			}
		}
		if r := getRun(e, alice, run.Run.ID); r.EventCount != 0 {
			t.Errorf("refused events were stored: %+v", r)
		}
		var list api.LeasesResponse
		e.do("GET", "/v1/leases", alice, nil, http.StatusOK, &list)
		if len(list.Leases) != 1 {
			t.Errorf("refused creates made leases: %d", len(list.Leases))
		}
		var runs api.RunsResponse
		e.do("GET", "/v1/runs", alice, nil, http.StatusOK, &runs)
		if len(runs.Runs) != 1 {
			t.Errorf("refused runs were stored: %d", len(runs.Runs))
		}
		// A finish's log is stored as bytes: any content is fine there.
		e.do("POST", "/v1/runs/"+run.Run.ID+"/finish", alice, `{"exitCode":0,"log":"a\u0000b"}`, http.StatusOK, nil)
		if status, raw := e.call("GET", "/v1/runs/"+run.Run.ID+"/logs", alice, nil); status != http.StatusOK || string(raw) != "a\x00b" {
			t.Errorf("log: %d %q", status, raw)
		}
	})
}

func nilIfEmpty(s string) any {
	if s == "" {
		return nil
	}
	return s
}

func getRun(e *env, token, id string) api.Run {
	e.t.Helper()
	var out api.RunResponse
	e.do("GET", "/v1/runs/"+id, token, nil, http.StatusOK, &out)
	return out.Run
}

// TestLongInputIsNotEchoed: error messages quote a short prefix of what
// the client sent, never a 100 KB path or value.
func TestLongInputIsNotEchoed(t *testing.T) {
	e := newEnv(t, openSQLite(t), clockwork.NewFakeClockAt(start), newFake())
	alice := e.token("alice", "acme")
	huge := strings.Repeat("a", 100<<10)
	for _, c := range []struct {
		method, path string
		body         any
		status       int
		code         string
	}{
		{"GET", "/" + huge, nil, http.StatusNotFound, api.CodeNotFound},
		{"GET", "/v1/leases/" + huge, nil, http.StatusBadRequest, api.CodeInvalidRequest},
		{"GET", "/v1/runs/" + huge, nil, http.StatusBadRequest, api.CodeInvalidRequest},
		{"POST", "/v1/leases", `{"sshPublicKey":"` + publicKey(t) + `","slug":"` + huge + `"}`, http.StatusBadRequest, api.CodeInvalidRequest},
		{"POST", "/v1/leases", `{"sshPublicKey":"` + publicKey(t) + `","target":"` + huge + `"}`, http.StatusBadRequest, api.CodeInvalidRequest},
		{"POST", "/v1/runs", `{"provider":"` + huge + `","command":["x"]}`, http.StatusBadRequest, api.CodeInvalidRequest},
	} {
		got := e.fail(c.method, c.path, alice, c.body, c.status, c.code)
		if len(got.Message) > 300 || !strings.Contains(got.Message, "aaaa") {
			t.Errorf("%s %.40s: message of %d bytes (%.80s...), want a short quote", c.method, c.path, len(got.Message), got.Message)
		}
	}
}

// TestUncleanPathsAnswerJSON: ServeMux would redirect //v1/whoami with an
// HTML 301; the coordinator routes the cleaned path instead, so every
// answer is JSON.
func TestUncleanPathsAnswerJSON(t *testing.T) {
	e := newEnv(t, openSQLite(t), clockwork.NewFakeClockAt(start), newFake())
	alice := e.token("alice", "acme")
	hc := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	for _, c := range []struct {
		path   string
		status int
	}{
		{"//v1/whoami", http.StatusOK},
		{"/v1//whoami", http.StatusOK},
		{"/v1/./whoami", http.StatusOK},
		{"//v1/health", http.StatusOK},
		{"//v1/nothing", http.StatusNotFound},
		{"/v1/leases/", http.StatusNotFound},
	} {
		req, err := http.NewRequest("GET", e.url+c.path, nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+alice)
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		raw, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		var body map[string]any
		if resp.StatusCode != c.status || resp.Header.Get("Content-Type") != api.ContentTypeJSON || json.Unmarshal(raw, &body) != nil {
			t.Errorf("GET %s: %d %s %q, want %d JSON", c.path, resp.StatusCode, resp.Header.Get("Content-Type"), raw, c.status)
		}
		if c.status == http.StatusOK && c.path != "//v1/health" && body["owner"] != "alice" {
			t.Errorf("GET %s: %s, want alice's whoami", c.path, raw)
		}
	}
}

// TestStalledBodyIsCut: an authenticated client that sends its headers
// and part of a body, then stops, does not hold a handler: after the body
// read timeout the server answers 408 and closes the connection.
func TestStalledBodyIsCut(t *testing.T) {
	e := newEnv(t, openSQLite(t), clockwork.NewFakeClockAt(start), newFake(),
		func(c *coordinator.Config) { c.BodyReadTimeout = 50 * time.Millisecond })
	u, err := url.Parse(e.url)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := net.Dial("tcp", u.Host)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	// A failsafe only: the server is expected to answer long before.
	if err := conn.SetDeadline(time.Now().Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(conn, "POST /v1/runs HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\nContent-Length: 4096\r\n\r\n{\"provider\":", u.Host, adminToken)
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("no response to a stalled body: %v", err)
	}
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestTimeout || !strings.Contains(string(raw), api.CodeRequestTimeout) {
		t.Errorf("stalled body: %d %s, want 408 %s", resp.StatusCode, raw, api.CodeRequestTimeout)
	}
	if _, err := conn.Read(make([]byte, 1)); err != io.EOF {
		t.Errorf("connection after a stalled body: %v, want closed (EOF)", err)
	}
}

// TestHTTPServerTimeouts: the http.Server the coordinator hands out has
// header and idle timeouts.
func TestHTTPServerTimeouts(t *testing.T) {
	e := newEnv(t, openSQLite(t), clockwork.NewFakeClockAt(start), newFake(),
		func(c *coordinator.Config) { c.ReadHeaderTimeout, c.IdleTimeout = 3*time.Second, 4*time.Second })
	hs := e.srv.HTTPServer()
	if hs.ReadHeaderTimeout != 3*time.Second || hs.IdleTimeout != 4*time.Second || hs.Handler != e.srv {
		t.Errorf("HTTPServer: header %v idle %v", hs.ReadHeaderTimeout, hs.IdleTimeout)
	}
	d := newEnv(t, openSQLite(t), clockwork.NewFakeClockAt(start), newFake()).srv.HTTPServer()
	if d.ReadHeaderTimeout <= 0 || d.IdleTimeout <= 0 {
		t.Errorf("default HTTPServer without timeouts: header %v idle %v", d.ReadHeaderTimeout, d.IdleTimeout)
	}
}
