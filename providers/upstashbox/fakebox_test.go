//go:build unix

package upstashbox_test

import (
	"bytes"
	"encoding/json"
	"io"
	"mime/multipart"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/jonboulle/clockwork"
)

// call sends one request to the fake with the test key (or key) and
// returns the status and body.
func call(t *testing.T, f *fakeBox, key, method, path, contentType string, body io.Reader) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, f.URL+path, body)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("X-Box-Api-Key", key)
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	resp, err := f.srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// The fake answers as the published SDK expects: the key in
// X-Box-Api-Key, {"error": ...} bodies, ephemeral boxes ready at once with
// expires_at, labels checked, the list filtered by one label, deleted at
// their TTL.
func TestFake(t *testing.T) {
	clock := clockwork.NewFakeClockAt(time.Unix(1_800_000_000, 0))
	f := newFake(t, clock)
	js := "application/json"

	if code, body := call(t, f, "wrong", "GET", "/v2/box", "", nil); code != 401 || !strings.Contains(body, `"error"`) {
		t.Errorf("wrong key: %d %s, want 401 with an error body", code, body)
	}
	for _, bad := range []string{
		`{"ephemeral":true,"ttl":259201}`,
		`{"ephemeral":true,"ttl":0}`,
		`{"ephemeral":true,"labels":["has space"]}`,
		`{"ephemeral":true,"labels":["a","b","c","d","e","f"]}`,
		`{"ephemeral":true,"labels":["twenty-one-characters"]}`,
		`{"ephemeral":true,"size":"huge"}`,
		`{"ephemeral":true,"runtime":"cobol"}`,
		`{"ephemeral":true,"colour":"red"}`,
	} {
		if code, body := call(t, f, testKey, "POST", "/v2/box", js, strings.NewReader(bad)); code != 400 {
			t.Errorf("create %s: %d %s, want 400", bad, code, body)
		}
	}
	code, body := call(t, f, testKey, "POST", "/v2/box", js, strings.NewReader(`{"name":"n1","labels":["crabbox","x:y"],"runtime":"python","size":"medium","ephemeral":true,"ttl":60}`))
	var box map[string]any
	if code != 200 || json.Unmarshal([]byte(body), &box) != nil {
		t.Fatalf("create: %d %s", code, body)
	}
	want := map[string]any{
		"id": "fake-box-00001", "name": "n1", "labels": []any{"crabbox", "x:y"}, "runtime": "python", "size": "medium", "status": "idle",
		"ephemeral": true, "created_at": 1.8e9, "updated_at": 1.8e9, "expires_at": 1.8e9 + 60,
	}
	if diff := cmp.Diff(want, box); diff != "" {
		t.Errorf("created box (-want +got):\n%s", diff)
	}
	f.addBox("other", []string{"other"}, time.Hour)
	for label, want := range map[string]int{"crabbox": 1, "other": 1, "none": 0} {
		_, body := call(t, f, testKey, "GET", "/v2/box?label="+label, "", nil)
		var all []map[string]any
		if err := json.Unmarshal([]byte(body), &all); err != nil || len(all) != want {
			t.Errorf("list label=%s: %s, want an array of %d", label, body, want)
		}
	}

	// Files: upload (paths and files), download, a missing file.
	var form bytes.Buffer
	mw := multipart.NewWriter(&form)
	_ = mw.WriteField("paths", f.dir+"/fake-box-00001/hello.txt")
	fw, _ := mw.CreateFormFile("files", "hello.txt")
	_, _ = fw.Write([]byte("hello\n"))
	_ = mw.Close()
	if code, body := call(t, f, testKey, "POST", "/v2/box/fake-box-00001/files/upload", mw.FormDataContentType(), &form); code != 200 {
		t.Errorf("upload: %d %s", code, body)
	}
	if code, body := call(t, f, testKey, "GET", "/v2/box/fake-box-00001/files/download?folder="+f.dir+"/fake-box-00001/hello.txt", "", nil); code != 200 || body != "hello\n" {
		t.Errorf("download: %d %q", code, body)
	}
	if code, _ := call(t, f, testKey, "GET", "/v2/box/fake-box-00001/files/download?folder="+f.dir+"/fake-box-00001/missing", "", nil); code != 404 {
		t.Errorf("download of a missing file: %d, want 404", code)
	}

	// exec and exec-stream.
	if code, body := call(t, f, testKey, "POST", "/v2/box/fake-box-00001/exec", js, strings.NewReader(`{"command":["sh","-c","cat hello.txt; echo oops >&2; exit 4"]}`)); code != 200 ||
		body != `{"error":"oops\n","exit_code":4,"output":"hello\n"}`+"\n" {
		t.Errorf("exec: %d %s", code, body)
	}
	if code, body := call(t, f, testKey, "POST", "/v2/box/fake-box-00001/exec-stream", js, strings.NewReader(`{"command":["sh","-c","echo out; exit 5"]}`)); code != 200 ||
		body != "out\nevent: exit\ndata: {\"cpu_ns\":0,\"exit_code\":5}\n\n" {
		t.Errorf("exec-stream: %d %q", code, body)
	}

	// Expiry at the TTL; deletion; a missing box.
	clock.Advance(time.Minute)
	if code, _ := call(t, f, testKey, "GET", "/v2/box/fake-box-00001", "", nil); code != 404 {
		t.Errorf("box past its TTL: %d, want 404", code)
	}
	if code, _ := call(t, f, testKey, "DELETE", "/v2/box/fake-box-00002", "", nil); code != 200 {
		t.Errorf("delete: %d", code)
	}
	if code, _ := call(t, f, testKey, "DELETE", "/v2/box/fake-box-00002", "", nil); code != 404 {
		t.Errorf("delete again: %d, want 404", code)
	}
	if diff := cmp.Diff([]string{"create fake-box-00001 n1", "create fake-box-00002 other", "expire fake-box-00001", "delete fake-box-00002"}, f.Events()); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}
}
