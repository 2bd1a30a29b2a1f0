package fakeproxmox_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"

	"github.com/crabbox-dev/crabbox/providers/internal/cloud/cloudtest"
	"github.com/crabbox-dev/crabbox/providers/proxmox/internal/fakeproxmox"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const token = "root@pam!t=secret"

// call sends a form-encoded request, as curl and pvesh do, and returns
// the status and the answer's data.
func call(t *testing.T, srv *httptest.Server, auth, method, path string, form url.Values) (int, json.RawMessage) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, srv.URL+"/api2/json"+path, strings.NewReader(form.Encode()))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Authorization", auth)
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	var out struct {
		Data json.RawMessage `json:"data"`
	}
	if err := json.Unmarshal(body, &out); err != nil {
		t.Fatalf("%s %s: %v in %q", method, path, err, body)
	}
	return resp.StatusCode, out.Data
}

// TestForm: the fake takes form data as the API does, refuses what the
// schema refuses (a wrong token, an unknown parameter, a tag with a ':',
// sshkeys not URL-encoded) and answers with UPIDs of finished tasks.
func TestForm(t *testing.T) {
	fake := fakeproxmox.New(cloudtest.NewFleet(t), token, "pve")
	fake.AddTemplate(9000, "pve", "tmpl")
	srv := httptest.NewServer(fake)
	t.Cleanup(srv.Close)
	auth := "PVEAPIToken=" + token
	if code, _ := call(t, srv, "PVEAPIToken=root@pam!t=wrong", http.MethodGet, "/version", nil); code != http.StatusUnauthorized {
		t.Errorf("wrong token: %d, want 401", code)
	}
	code, data := call(t, srv, auth, http.MethodPost, "/nodes/pve/qemu/9000/clone", url.Values{"newid": {"100"}, "name": {"crabbox-x"}})
	var upid string
	if code != http.StatusOK || json.Unmarshal(data, &upid) != nil || !strings.HasPrefix(upid, "UPID:pve:") {
		t.Fatalf("clone: %d %s", code, data)
	}
	code, data = call(t, srv, auth, http.MethodGet, "/nodes/pve/tasks/"+url.PathEscape(upid)+"/status", nil)
	var st struct{ Status, ExitStatus string }
	if code != http.StatusOK || json.Unmarshal(data, &st) != nil || st.Status != "stopped" || st.ExitStatus != "OK" {
		t.Errorf("task status: %d %s", code, data)
	}
	for _, bad := range []url.Values{
		{"colour": {"red"}},
		{"tags": {"lease:cbx_1"}},
		{"sshkeys": {"ssh-ed25519 AAAA key"}},
	} {
		if code, _ := call(t, srv, auth, http.MethodPut, "/nodes/pve/qemu/100/config", bad); code != http.StatusBadRequest {
			t.Errorf("config %v: %d, want 400", bad, code)
		}
	}
	if code, _ := call(t, srv, auth, http.MethodPut, "/nodes/pve/qemu/100/config", url.Values{
		"tags": {"crabbox.true;lease.cbx_1"}, "sshkeys": {"ssh-ed25519%20AAAA%20key%0A"}, "cores": {"2"}, "memory": {"4096"},
	}); code != http.StatusOK {
		t.Errorf("config: %d", code)
	}
	vms := fake.VMs()
	if len(vms) != 1 {
		t.Fatalf("VMs %+v", vms)
	}
	got := vms[0]
	want := fakeproxmox.VM{VMID: 100, Node: "pve", Name: "crabbox-x", Cores: 2, MemoryMiB: 4096, Tags: "crabbox.true;lease.cbx_1",
		SSHKeys: "ssh-ed25519 AAAA key\n", Agent: true, Status: "stopped", IPv4: got.IPv4}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("VM (-want +got):\n%s", diff)
	}
	if code, _ := call(t, srv, auth, http.MethodGet, "/nodes/pve/qemu/101/status/current", nil); code != http.StatusInternalServerError {
		t.Errorf("a missing VM: %d, want 500 (its configuration file does not exist)", code)
	}
}
