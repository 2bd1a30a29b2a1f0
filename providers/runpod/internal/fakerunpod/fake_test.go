package fakerunpod_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"

	"github.com/crabbox-dev/crabbox/providers/internal/cloud/cloudtest"
	"github.com/crabbox-dev/crabbox/providers/runpod/internal/fakerunpod"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const key = "rpa_TEST"

// call sends a request to the fake and returns the status and body.
func call(t *testing.T, srv *httptest.Server, tr *http.Transport, auth, method, path, body string) (int, string) {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, srv.URL+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	if auth != "" {
		req.Header.Set("Authorization", "Bearer "+auth)
	}
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, strings.TrimSpace(string(b))
}

// TestFake checks the fake against the OpenAPI description's operations:
// status codes, the Pod schema's fields, the create's validation and the
// list's filters.
func TestFake(t *testing.T) {
	fake := fakerunpod.New(cloudtest.NewFleet(t), key)
	srv := httptest.NewServer(fake)
	defer srv.Close()
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()

	if code, body := call(t, srv, tr, "", "GET", "/pods", ""); code != 401 || body != `{"message":"Unauthorized"}` {
		t.Errorf("no key: %d %s", code, body)
	}
	if code, body := call(t, srv, tr, "wrong", "GET", "/pods", ""); code != 401 {
		t.Errorf("wrong key: %d %s", code, body)
	}
	for _, bad := range []string{
		`{"imageName":"x","cloudType":"PRIVATE"}`,
		`{"imageName":"x","gpuTypeIds":["NVIDIA GTX 1"]}`,
		`{"imageName":"x","gpuCount":0}`,
		`{"imageName":"x","ports":["22"]}`,
		`{"imageName":"x","colour":"blue"}`,
		`{"name":"no image"}`,
		`not json`,
	} {
		if code, body := call(t, srv, tr, key, "POST", "/pods", bad); code != 400 || !strings.Contains(body, `"status":400`) {
			t.Errorf("create %s: %d %s, want 400", bad, code, body)
		}
	}
	code, body := call(t, srv, tr, key, "POST", "/pods",
		`{"name":"a","imageName":"img","gpuTypeIds":["NVIDIA L4"],"gpuCount":2,"cloudType":"COMMUNITY","ports":["22/tcp"],"env":{"K":"V"},"volumeInGb":0}`)
	if code != 201 {
		t.Fatalf("create: %d %s", code, body)
	}
	var p map[string]any
	if err := json.Unmarshal([]byte(body), &p); err != nil {
		t.Fatal(err)
	}
	if p["desiredStatus"] != "RUNNING" || p["publicIp"] != nil || p["costPerHr"] != 0.44 || p["image"] != "img" {
		t.Errorf("created pod %s", body)
	}
	id := p["id"].(string)
	code, body = call(t, srv, tr, key, "GET", "/pods/"+id, "")
	if code != 200 || !strings.Contains(body, `"publicIp":"127.0.0.1"`) || !strings.Contains(body, `"portMappings":{"22":`) {
		t.Errorf("get: %d %s", code, body)
	}
	call(t, srv, tr, key, "POST", "/pods", `{"name":"b","imageName":"img"}`)
	for _, tt := range []struct{ query, want string }{
		{"", "a,b"}, {"?name=b", "b"}, {"?id=" + id, "a"}, {"?desiredStatus=EXITED", ""},
	} {
		code, body := call(t, srv, tr, key, "GET", "/pods"+tt.query, "")
		var pods []struct{ Name string }
		if code != 200 || json.Unmarshal([]byte(body), &pods) != nil {
			t.Fatalf("list%s: %d %s", tt.query, code, body)
		}
		var names []string
		for _, p := range pods {
			names = append(names, p.Name)
		}
		if got := strings.Join(names, ","); got != tt.want {
			t.Errorf("list%s = %q, want %q", tt.query, got, tt.want)
		}
	}
	if code, body := call(t, srv, tr, key, "POST", "/pods/"+id+"/stop", ""); code != 200 || !strings.Contains(body, `"desiredStatus":"EXITED"`) {
		t.Errorf("stop: %d %s", code, body)
	}
	if code, _ := call(t, srv, tr, key, "DELETE", "/pods/"+id, ""); code != 204 {
		t.Errorf("delete: %d", code)
	}
	if code, _ := call(t, srv, tr, key, "GET", "/pods/"+id, ""); code != 404 {
		t.Errorf("get a deleted pod: %d, want 404", code)
	}
	if code, _ := call(t, srv, tr, key, "DELETE", "/pods/"+id, ""); code != 400 {
		t.Errorf("delete a deleted pod: %d, want 400 (the description's answer to an invalid pod ID)", code)
	}
	want := []string{"create NVIDIA L4", "create NVIDIA GeForce RTX 4090", "stop", "delete"}
	if diff := cmp.Diff(want, fake.Events()); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}
	fake.SetFull("NVIDIA L4")
	if code, body := call(t, srv, tr, key, "POST", "/pods", `{"imageName":"i","gpuTypeIds":["NVIDIA L4"]}`); code != 500 || !strings.Contains(body, "no instances currently available") {
		t.Errorf("create without capacity: %d %s", code, body)
	}
	fake.Fail(fakerunpod.OpList, 429, 1, "7")
	if code, _ := call(t, srv, tr, key, "GET", "/pods", ""); code != 429 {
		t.Errorf("injected 429: %d", code)
	}
}
