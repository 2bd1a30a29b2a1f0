package fakebrev_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"

	"github.com/crabbox-dev/crabbox/providers/internal/tagcloud/tagcloudtest"
	"github.com/crabbox-dev/crabbox/providers/nvidiabrev/internal/fakebrev"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const (
	key = "bak-fake"
	org = "org-1"
)

func call(t *testing.T, srv *httptest.Server, auth, method, path, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, srv.URL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if auth != "" {
		req.Header.Set("Authorization", "Bearer "+auth)
	}
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

// TestFake: the fake answers as brev-cli's client expects: bearer API
// key, organization scope, Brev's error list, the workspace lifecycle
// (DEPLOYING in the create's answer, RUNNING after, renamed by PUT, gone
// after DELETE), the instance type listing without full groups, and the
// name rule.
func TestFake(t *testing.T) {
	cloud := tagcloudtest.NewFakeCloud(t)
	cloud.SetNoBoot() // the lifecycle tests boot real boxes; this one needs no bootstrap
	f := fakebrev.New(cloud, key, org, fakebrev.InstanceType{Type: "a100-1x", GPU: "A100", GPUCount: 1, Price: "1.5", Groups: []string{"wg-1", "wg-2"}})
	srv := httptest.NewServer(f)
	t.Cleanup(srv.Close)
	t.Cleanup(srv.Client().CloseIdleConnections)

	if st, body := call(t, srv, "", "GET", "/api/organizations/org-1/workspaces", ""); st != 401 || !strings.Contains(body, `"errors":[{"message":"unauthorized"`) {
		t.Errorf("no key: %d %s", st, body)
	}
	if st, _ := call(t, srv, key, "GET", "/api/organizations/org-2/workspaces", ""); st != 403 {
		t.Errorf("another organization: %d", st)
	}
	if st, body := call(t, srv, key, "GET", "/api/organizations/org-1/workspaces", ""); st != 200 || body != "[]" {
		t.Errorf("empty list: %d %s", st, body)
	}
	f.SetFull("a100-1x", "wg-1")
	st, body := call(t, srv, key, "GET", "/api/instances/alltypesavailable/org-1", "")
	var types struct {
		AllInstanceTypes []struct {
			Type            string `json:"type"`
			WorkspaceGroups []struct {
				ID string `json:"id"`
			} `json:"workspace_groups"`
			BasePrice struct{ Amount string } `json:"base_price"`
		} `json:"allInstanceTypes"`
	}
	if err := json.Unmarshal([]byte(body), &types); st != 200 || err != nil || len(types.AllInstanceTypes) != 1 ||
		len(types.AllInstanceTypes[0].WorkspaceGroups) != 1 || types.AllInstanceTypes[0].WorkspaceGroups[0].ID != "wg-2" ||
		types.AllInstanceTypes[0].BasePrice.Amount != "1.5" {
		t.Errorf("listing with wg-1 full: %d %s", st, body)
	}
	if st, _ := call(t, srv, key, "POST", "/api/organizations/org-1/workspaces", `{"name":"-bad","instanceType":"a100-1x","workspaceGroupId":"wg-2"}`); st != 400 {
		t.Errorf("bad name: %d", st)
	}
	if st, _ := call(t, srv, key, "POST", "/api/organizations/org-1/workspaces", `{"name":"ok","instanceType":"a100-1x","workspaceGroupId":"wg-1"}`); st != 400 {
		t.Errorf("full group: %d", st)
	}
	st, body = call(t, srv, key, "POST", "/api/organizations/org-1/workspaces",
		`{"name":"box","instanceType":"a100-1x","workspaceGroupId":"wg-2","labels":{"a":"b"},"vmBuild":{"lifeCycleScriptAttr":{"script":"#!/bin/sh\n"}}}`)
	var ws struct {
		ID, Name, Status, DNS, InstanceType string
		Labels                              map[string]string
	}
	if err := json.Unmarshal([]byte(body), &ws); st != 200 || err != nil || ws.Status != "DEPLOYING" || ws.Name != "box" || ws.Labels["a"] != "b" {
		t.Fatalf("create: %d %s", st, body)
	}
	if st, body := call(t, srv, key, "GET", "/api/workspaces/"+ws.ID, ""); st != 200 || !strings.Contains(body, `"status":"RUNNING"`) {
		t.Errorf("read: %d %s", st, body)
	}
	if st, body := call(t, srv, key, "PUT", "/api/workspaces/"+ws.ID, `{"name":"box2"}`); st != 200 || !strings.Contains(body, `"name":"box2"`) {
		t.Errorf("rename: %d %s", st, body)
	}
	if st, _ := call(t, srv, key, "DELETE", "/api/workspaces/"+ws.ID, ""); st != 200 {
		t.Errorf("delete: %d", st)
	}
	if st, _ := call(t, srv, key, "GET", "/api/workspaces/"+ws.ID, ""); st != 404 {
		t.Errorf("read after delete: %d", st)
	}
	if st, _ := call(t, srv, key, "DELETE", "/api/workspaces/"+ws.ID, ""); st != 404 {
		t.Errorf("second delete: %d", st)
	}
	want := []string{"create box", "rename " + ws.ID + " box2", "delete " + ws.ID}
	if diff := cmp.Diff(want, f.Events()); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}
	cloud.CheckReleased(t)
}
