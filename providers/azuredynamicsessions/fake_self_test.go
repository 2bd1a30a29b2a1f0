//go:build unix

package azuredynamicsessions_test

import (
	"bytes"
	"encoding/json"
	"io"
	"mime/multipart"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/jonboulle/clockwork"
)

// The fake answers as the published description says: error bodies are
// ErrorResponses, a session comes with the first request naming it and
// has the Session fields, listSessions pages with nextLink, executions
// answer a SessionCodeExecutionResource, and api-version and the bearer
// token are required.
func TestFakeFollowsTheDescription(t *testing.T) {
	f := newFake(t, clockwork.NewFakeClockAt(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)), 5*time.Minute)
	client := f.srv.Client()
	do := func(method, p string, q url.Values, body io.Reader, ctype string) (int, map[string]any) {
		t.Helper()
		if q == nil {
			q = url.Values{}
		}
		if q.Get("api-version") == "" {
			q.Set("api-version", fakeAPIVersion)
		}
		req, err := http.NewRequest(method, f.URL()+p+"?"+q.Encode(), body)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+fakeToken)
		if ctype != "" {
			req.Header.Set("Content-Type", ctype)
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var out map[string]any
		_ = json.NewDecoder(resp.Body).Decode(&out)
		return resp.StatusCode, out
	}
	id := url.Values{"identifier": {"testid1"}}

	st, body := do(http.MethodGet, "/session", id, nil, "")
	if st != http.StatusNotFound || body["error"].(map[string]any)["code"] != "SessionNotFound" {
		t.Errorf("GET /session of no session = %d %v, want 404 with an ErrorResponse", st, body)
	}
	var form bytes.Buffer
	mw := multipart.NewWriter(&form)
	fw, _ := mw.CreateFormFile("file", "testfile.yaml")
	_, _ = fw.Write([]byte("1010"))
	_ = mw.Close()
	q := url.Values{"identifier": {"testid1"}, "path": {"/"}}
	st, body = do(http.MethodPost, "/files", q, &form, mw.FormDataContentType())
	if want := map[string]any{"name": "testfile.yaml", "type": "File", "contentType": "application/octet-stream", "sizeInBytes": 4.0,
		"lastModifiedAt": "2026-01-02T03:04:05Z", "directory": "/"}; st != http.StatusOK || !cmp.Equal(want, body) {
		t.Errorf("upload = %d %v, want 200 %v", st, body, want)
	}
	st, body = do(http.MethodGet, "/session", id, nil, "")
	if want := map[string]any{"identifier": "testid1", "createdAt": "2026-01-02T03:04:05Z", "lastAccessedAt": "2026-01-02T03:04:05Z",
		"expireAt": "2026-01-02T03:09:05Z"}; st != http.StatusOK || body["etag"] == nil || !cmp.Equal(want, without(body, "etag")) {
		t.Errorf("GET /session = %d %v, want 200 %v and an etag", st, body, want)
	}
	st, body = do(http.MethodPost, "/executions", id, bytes.NewReader([]byte(
		`{"codeInputType":"Inline","executionType":"Synchronous","code":"echo $((7*9)); cat /mnt/data/testfile.yaml","timeoutInSeconds":60}`)), "application/json")
	if res, _ := body["result"].(map[string]any); st != http.StatusOK || body["status"] != "Succeeded" || res["stdout"] != "63\n1010" {
		t.Errorf("execution = %d %v, want Succeeded with stdout 63 and the uploaded file", st, body)
	}
	for _, s := range []string{"testid2", "testid3"} {
		do(http.MethodPost, "/executions", url.Values{"identifier": {s}}, bytes.NewReader([]byte(
			`{"codeInputType":"Inline","executionType":"Synchronous","code":"true","timeoutInSeconds":5}`)), "application/json")
	}
	st, body = do(http.MethodGet, "/listSessions", nil, nil, "")
	if st != http.StatusOK || len(body["sessions"].([]any)) != 2 || body["nextLink"] == nil {
		t.Errorf("listSessions = %d %v, want a page of 2 with a nextLink", st, body)
	}
	st, body = do(http.MethodGet, "/listSessions", url.Values{"skip": {"2"}}, nil, "")
	if st != http.StatusOK || len(body["sessions"].([]any)) != 1 || body["nextLink"] != nil {
		t.Errorf("listSessions skip=2 = %d %v, want the last session and no nextLink", st, body)
	}
	if st, _ = do(http.MethodGet, "/listSessions", url.Values{"api-version": {"2024-02-02-preview"}}, nil, ""); st != http.StatusBadRequest {
		t.Errorf("an api-version the fake does not speak = %d, want 400", st)
	}
	f.clock.(*clockwork.FakeClock).Advance(5 * time.Minute)
	if st, _ = do(http.MethodGet, "/session", id, nil, ""); st != http.StatusNotFound {
		t.Errorf("GET /session after the cooldown = %d, want 404 (ended)", st)
	}
	req, _ := http.NewRequest(http.MethodGet, f.URL()+"/listSessions?api-version="+fakeAPIVersion, nil)
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("a request without a token = %d, want 401", resp.StatusCode)
	}
}

func without(m map[string]any, key string) map[string]any {
	out := map[string]any{}
	for k, v := range m {
		if k != key {
			out[k] = v
		}
	}
	return out
}
