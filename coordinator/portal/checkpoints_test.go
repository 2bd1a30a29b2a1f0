package portal_test

import (
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/crabbox-dev/crabbox/coordinator/api"
	"github.com/crabbox-dev/crabbox/coordinator/store"
)

// checkpoint records a ready checkpoint of owner in the store, as the
// coordinator does after a provider made its artifact.
func (s *site) checkpoint(id, owner string) {
	s.t.Helper()
	ctx := s.t.Context()
	now := s.clock.Now()
	if _, err := s.store.CreateCheckpoint(ctx, store.CheckpointCreate{Checkpoint: store.Checkpoint{
		ID: id, Owner: owner, Org: "acme", Provider: "aws", SourceLease: "cbx_00000000000a", GBMonthUSD: 0.05,
	}, Now: now}); err != nil {
		s.t.Fatal(err)
	}
	if _, err := s.store.ReadyCheckpoint(ctx, id, store.CheckpointArtifactInfo{ArtifactID: "ami-123", SizeBytes: 8e9}, now); err != nil {
		s.t.Fatal(err)
	}
}

func TestPortalCheckpoints(t *testing.T) {
	s := newSite(t, false)
	alice, bob := s.token("alice", "acme"), s.token("bob", "acme")
	const id = "ckp_0000000000a1"
	s.checkpoint(id, "alice")
	s.checkpoint("ckp_0000000000b1", "bob")
	b := s.browser()
	b.login(alice)

	s.clock.Advance(10 * time.Hour) // 8 GB * 0.05 USD * 10/730
	if r := b.get("/portal/usage"); !strings.Contains(r.body, "1 checkpoints stored, $0.01 of storage") {
		t.Errorf("usage page lacks the checkpoint storage:\n%s", r.body)
	}
	r := b.get("/portal/checkpoints")
	if r.status != http.StatusOK || !strings.Contains(r.body, `data-id="`+id+`"`) || strings.Contains(r.body, "ckp_0000000000b1") {
		t.Fatalf("checkpoints page: status %d:\n%s", r.status, r.body)
	}
	if r := b.get("/portal/checkpoints/ckp_0000000000b1"); r.status != http.StatusNotFound {
		t.Errorf("bob's checkpoint: status %d, want 404", r.status)
	}
	r = b.get("/portal/checkpoints/" + id)
	for _, want := range []string{"ami-123", "8.00 GB", `data-type="created"`, `data-type="ready"`, "manual: kept until deleted", `id="retention-form"`} {
		if r.status != http.StatusOK || !strings.Contains(r.body, want) {
			t.Fatalf("checkpoint page: status %d, lacks %q:\n%s", r.status, want, r.body)
		}
	}
	csrf := csrfOf(t, r.body)

	// Retention: without the CSRF token nothing changes; with it, it does.
	if r := b.post("/portal/checkpoints/"+id+"/retention", url.Values{"mode": {"unused"}, "hours": {"48"}}, ""); r.status != http.StatusForbidden {
		t.Errorf("retention without CSRF token: status %d", r.status)
	}
	if r := b.post("/portal/checkpoints/"+id+"/retention", url.Values{"csrf": {csrf}, "mode": {"unused"}, "hours": {"0"}}, ""); r.status != http.StatusBadRequest {
		t.Errorf("retention of 0 hours: status %d", r.status)
	}
	r = b.post("/portal/checkpoints/"+id+"/retention", url.Values{"csrf": {csrf}, "mode": {"unused"}, "hours": {"48"}}, "")
	if r.status != http.StatusOK || !strings.Contains(r.body, "Retention changed.") || !strings.Contains(r.body, "deleted after 48h unused") {
		t.Errorf("retention change: status %d:\n%s", r.status, r.body)
	}
	cl := s.api(alice)
	if cp, err := cl.GetCheckpoint(t.Context(), id); err != nil || cp.Retention.UnusedExpirySeconds != 48*3600 {
		t.Errorf("checkpoint after the retention change = %+v, %v", cp.Retention, err)
	}

	// Delete asks first; a POST without the confirmation or the CSRF
	// token deletes nothing.
	r = b.get("/portal/checkpoints/" + id + "/delete")
	if r.status != http.StatusOK || !strings.Contains(r.body, `id="confirm-delete"`) {
		t.Fatalf("delete confirmation: status %d:\n%s", r.status, r.body)
	}
	if r := b.post("/portal/checkpoints/"+id+"/delete", url.Values{"confirm": {"yes"}}, ""); r.status != http.StatusForbidden {
		t.Errorf("delete without CSRF token: status %d", r.status)
	}
	if r := b.post("/portal/checkpoints/"+id+"/delete", url.Values{"csrf": {csrf}, "confirm": {"yes"}}, "https://evil.example"); r.status != http.StatusForbidden {
		t.Errorf("delete from another origin: status %d", r.status)
	}
	if r := b.post("/portal/checkpoints/"+id+"/delete", url.Values{"csrf": {csrf}}, ""); r.status != http.StatusOK || !strings.Contains(r.body, `id="confirm-delete"`) {
		t.Errorf("unconfirmed delete: status %d", r.status)
	}
	if cp, _ := cl.GetCheckpoint(t.Context(), id); cp.State != api.CheckpointReady {
		t.Fatalf("checkpoint %s before the confirmed delete", cp.State)
	}
	r = b.post("/portal/checkpoints/"+id+"/delete", url.Values{"csrf": {csrf}, "confirm": {"yes"}}, "")
	if r.status != http.StatusOK || !strings.Contains(r.body, "Deletion requested") || !strings.Contains(r.body, `data-type="delete_requested"`) {
		t.Errorf("confirmed delete: status %d:\n%s", r.status, r.body)
	}
	if cp, _ := cl.GetCheckpoint(t.Context(), id); cp.State != api.CheckpointDeleting {
		t.Errorf("checkpoint %s after the confirmed delete, want deleting", cp.State)
	}
	// Bob cannot delete alice's checkpoint through his session.
	bb := s.browser()
	bb.login(bob)
	r = bb.get("/portal/checkpoints")
	if r := bb.post("/portal/checkpoints/"+id+"/delete", url.Values{"csrf": {csrfOf(t, r.body)}, "confirm": {"yes"}}, ""); r.status != http.StatusNotFound {
		t.Errorf("bob deleting alice's checkpoint: status %d, want 404", r.status)
	}
}
