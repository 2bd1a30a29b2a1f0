package cloud_test

import (
	"strings"
	"testing"

	"github.com/crabbox-dev/crabbox/lease"
	"github.com/crabbox-dev/crabbox/providers/internal/cloud"
)

// TestStartAcquire: the labels and the user data name the same new host
// key, the user data installs the lease key; a bad request makes nothing.
func TestStartAcquire(t *testing.T) {
	key, err := lease.NewKey()
	if err != nil {
		t.Fatal(err)
	}
	req := acquireRequest()
	req.PublicKey = key.AuthorizedKey()
	st, err := cloud.StartAcquire(req, created, cloud.LabelOptions{Provider: "hetzner", ServerType: "cx23", Owner: "alice"},
		cloud.Bootstrap{Ports: []int{2222}, WorkRoot: cloud.DefaultWorkRoot})
	if err != nil {
		t.Fatal(err)
	}
	info, err := cloud.ParseLabels(st.Labels)
	if err != nil {
		t.Fatal(err)
	}
	if info.HostKey != st.HostKey.AuthorizedKey() || st.Labels[cloud.LabelServerType] != "cx23" || st.Labels[cloud.LabelLease] != req.LeaseID {
		t.Errorf("labels %v: want the new host key, server type cx23 and lease %s", st.Labels, req.LeaseID)
	}
	if !strings.Contains(st.UserData, strings.TrimSpace(req.PublicKey)) {
		t.Errorf("user data does not install the lease key:\n%s", st.UserData)
	}
	req.ExpiresAt = created
	if _, err := cloud.StartAcquire(req, created, cloud.LabelOptions{Provider: "hetzner"}, cloud.Bootstrap{}); err == nil || !strings.Contains(err.Error(), "expiry") {
		t.Errorf("StartAcquire of an expired request: %v, want an error naming the expiry", err)
	}
}
