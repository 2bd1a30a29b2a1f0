//go:build unix

package opensandbox_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// The fake answers as the published specs say: these checks speak to it
// directly, not through the backend.
func TestFakeFollowsTheSpecs(t *testing.T) {
	f := newFake(t)
	c := f.client()
	call := func(method, path, key string, body any) (int, http.Header, map[string]any) {
		t.Helper()
		var rd io.Reader
		if body != nil {
			b, _ := json.Marshal(body)
			rd = bytes.NewReader(b)
		}
		req, _ := http.NewRequest(method, f.api.URL+path, rd)
		if key != "" {
			req.Header.Set("OPEN-SANDBOX-API-KEY", key)
		}
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var out map[string]any
		_ = json.NewDecoder(resp.Body).Decode(&out)
		return resp.StatusCode, resp.Header, out
	}
	create := map[string]any{"image": map[string]string{"uri": "ubuntu:24.04"}, "entrypoint": []string{"tail", "-f", "/dev/null"},
		"timeout": 600, "resourceLimits": map[string]string{"cpu": "1"}, "metadata": map[string]string{"team": "crabs"}}

	if st, _, out := call("POST", "/v1/sandboxes", "", create); st != 401 || out["code"] != "MISSING_API_KEY" {
		t.Errorf("create without a key: %d %v", st, out)
	}
	st, h, out := call("POST", "/v1/sandboxes", f.key, create)
	if st != 202 || out["status"].(map[string]any)["state"] != "Pending" || h.Get("Location") != "/v1/sandboxes/"+out["id"].(string) {
		t.Fatalf("create: %d %v %v", st, h, out)
	}
	id := out["id"].(string)
	if _, _, out := call("GET", "/v1/sandboxes/"+id, f.key, nil); out["status"].(map[string]any)["state"] != "Running" || out["expiresAt"] != "2026-12-01T12:10:00Z" {
		t.Errorf("get: %v", out)
	}
	for name, body := range map[string]map[string]any{
		"short timeout":   {"image": map[string]string{"uri": "x"}, "entrypoint": []string{"x"}, "timeout": 59, "resourceLimits": map[string]string{}},
		"long timeout":    {"image": map[string]string{"uri": "x"}, "entrypoint": []string{"x"}, "timeout": 86401, "resourceLimits": map[string]string{}},
		"no entrypoint":   {"image": map[string]string{"uri": "x"}, "timeout": 60, "resourceLimits": map[string]string{}},
		"reserved key":    {"image": map[string]string{"uri": "x"}, "entrypoint": []string{"x"}, "resourceLimits": map[string]string{}, "metadata": map[string]string{"opensandbox.io/x": "y"}},
		"bad label value": {"image": map[string]string{"uri": "x"}, "entrypoint": []string{"x"}, "resourceLimits": map[string]string{}, "metadata": map[string]string{"a": "-b"}},
	} {
		if st, _, out := call("POST", "/v1/sandboxes", f.key, body); st != 400 || out["code"] == "" || out["message"] == "" {
			t.Errorf("create with %s: %d %v, want 400 with an ErrorResponse", name, st, out)
		}
	}
	call("POST", "/v1/sandboxes", f.key, create)
	q := url.Values{"metadata": {"team=crabs"}, "pageSize": {"1"}, "page": {"2"}}
	_, _, out = call("GET", "/v1/sandboxes?"+q.Encode(), f.key, nil)
	want := map[string]any{"page": 2.0, "pageSize": 1.0, "totalItems": 2.0, "totalPages": 2.0, "hasNextPage": false}
	if diff := cmp.Diff(want, out["pagination"]); diff != "" || len(out["items"].([]any)) != 1 {
		t.Errorf("list page 2 (-want +got):\n%s\n%v", diff, out)
	}
	if st, _, _ := call("GET", "/v1/sandboxes?pageSize=201", f.key, nil); st != 400 {
		t.Errorf("list with pageSize 201: %d, want 400", st)
	}
	if st, _, _ := call("POST", "/v1/sandboxes/"+id+"/renew-expiration", f.key, map[string]string{"expiresAt": "2026-12-01T12:05:00Z"}); st != 400 {
		t.Errorf("renew to before the current expiration: %d, want 400", st)
	}
	if st, _, out := call("POST", "/v1/sandboxes/"+id+"/renew-expiration", f.key, map[string]string{"expiresAt": "2026-12-01T13:00:00Z"}); st != 200 || out["expiresAt"] != "2026-12-01T13:00:00Z" {
		t.Errorf("renew: %d %v", st, out)
	}
	_, _, ep := call("GET", "/v1/sandboxes/"+id+"/endpoints/44772", f.key, nil)
	execd := "http://" + ep["endpoint"].(string)
	token := ep["headers"].(map[string]any)["X-EXECD-ACCESS-TOKEN"].(string)
	if resp, err := c.Get(execd + "/ping"); err != nil || resp.StatusCode != 401 {
		t.Errorf("execd without its token: %v %v", resp, err)
	} else {
		resp.Body.Close()
	}
	req, _ := http.NewRequest("POST", execd+"/command", strings.NewReader(`{"command":"printf 'a\\n\\nb'; exit 3"}`))
	req.Header.Set("X-EXECD-ACCESS-TOKEN", token)
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var events []string
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if line := sc.Text(); line != "" {
			var ev map[string]any
			if err := json.Unmarshal([]byte(line), &ev); err != nil {
				t.Fatalf("event %q: %v", line, err)
			}
			s := ev["type"].(string) + ":"
			if e, ok := ev["error"].(map[string]any); ok {
				s += e["ename"].(string) + "=" + e["evalue"].(string)
			} else if ev["type"] != "init" {
				s += ev["text"].(string)
			}
			events = append(events, s)
		}
	}
	if diff := cmp.Diff([]string{"init:", "stdout:a", "stdout:\n", "stdout:b", "error:CommandExecError=3"}, events); diff != "" {
		t.Errorf("command events (-want +got):\n%s", diff)
	}
	if st, _, _ := call("DELETE", "/v1/sandboxes/"+id, f.key, nil); st != 204 {
		t.Errorf("delete: %d", st)
	}
	if st, _, out := call("GET", "/v1/sandboxes/"+id, f.key, nil); st != 404 || out["code"] == "" {
		t.Errorf("get after delete: %d %v", st, out)
	}
}
