package coordinator_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/crabbox-dev/crabbox/coordinator"
	"github.com/crabbox-dev/crabbox/coordinator/api"
	"github.com/crabbox-dev/crabbox/coordinator/auth"
	"github.com/crabbox-dev/crabbox/coordinator/client"
)

// putShare replaces lease id's share as token and returns the answer.
func (e *env) putShare(token, id string, share api.LeaseShare) api.ShareResponse {
	e.t.Helper()
	var out api.ShareResponse
	e.do("PUT", leasePath(id, "/share"), token, share, http.StatusOK, &out)
	return out
}

// sharedWith lists the IDs and access of the leases shared with token.
func (e *env) sharedWith(token string) map[string]string {
	e.t.Helper()
	var list api.LeasesResponse
	e.do("GET", "/v1/leases?shared=true", token, nil, http.StatusOK, &list)
	out := map[string]string{}
	for _, l := range list.Leases {
		out[l.ID] = l.Access
	}
	return out
}

// TestShareRoles: each role reaches what it grants and no more; a lease
// not shared with the caller does not exist for it.
func TestShareRoles(t *testing.T) {
	eachStore(t, func(t *testing.T, open opener) {
		e := simple(t, open)
		alice, bob, carol, dave := e.token("alice", "acme"), e.token("bob", "acme"), e.token("carol", "globex"), e.token("dave", "acme")
		l := e.create(alice, leaseReq(t))
		path := leasePath(l.ID, "")

		// Not shared: nobody else sees it.
		for _, tok := range []string{bob, carol, dave} {
			e.fail("GET", path, tok, nil, http.StatusNotFound, api.CodeNotFound)
			e.fail("GET", path+"/share", tok, nil, http.StatusNotFound, api.CodeNotFound)
			e.fail("POST", path+"/heartbeat", tok, nil, http.StatusNotFound, api.CodeNotFound)
		}
		var empty api.ShareResponse
		e.do("GET", path+"/share", alice, nil, http.StatusOK, &empty)
		if diff := cmp.Diff(api.ShareResponse{LeaseID: l.ID}, empty); diff != "" {
			t.Errorf("unshared share (-want +got):\n%s", diff)
		}

		got := e.putShare(alice, l.Slug, api.LeaseShare{Users: map[string]api.ShareRole{" Bob ": api.ShareRead, "carol": api.ShareUse}})
		want := api.ShareResponse{LeaseID: l.ID, Share: api.LeaseShare{
			Users:     map[string]api.ShareRole{"bob": api.ShareRead, "carol": api.ShareUse},
			UpdatedAt: e.clock.Now().UTC(), UpdatedBy: "alice",
		}}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("PUT share (-want +got):\n%s", diff)
		}

		// bob reads: he sees the lease (no share, no key, no box
		// endpoint) and can do nothing with it.
		bl := e.get(bob, l.ID)
		if bl.Access != "read" || bl.Share != nil || bl.AccessKey != "" || bl.Host != "" || bl.SSHUser != "" || bl.SSHPort != "" {
			t.Errorf("bob's view: access %q share %v key %q host %q user %q port %q", bl.Access, bl.Share, bl.AccessKey, bl.Host, bl.SSHUser, bl.SSHPort)
		}
		e.fail("POST", path+"/heartbeat", bob, nil, http.StatusForbidden, api.CodeForbidden)
		e.fail("POST", path+"/release", bob, nil, http.StatusForbidden, api.CodeForbidden)
		e.fail("GET", path+"/share", bob, nil, http.StatusForbidden, api.CodeForbidden)
		e.fail("PUT", path+"/share", bob, api.LeaseShare{Org: api.ShareUse}, http.StatusForbidden, api.CodeForbidden)
		e.fail("DELETE", path+"/share", bob, nil, http.StatusForbidden, api.CodeForbidden)
		if diff := cmp.Diff(map[string]string{l.ID: "read"}, e.sharedWith(bob)); diff != "" {
			t.Errorf("shared with bob (-want +got):\n%s", diff)
		}

		// carol, in another org, uses: she may heartbeat, not release.
		if cl := e.get(carol, l.Slug); cl.Access != "use" || cl.Host == "" || cl.AccessKey != "" {
			t.Errorf("carol's view: access %q host %q key %q", cl.Access, cl.Host, cl.AccessKey)
		}
		e.clock.Advance(time.Minute)
		var hb api.LeaseResponse
		e.do("POST", path+"/heartbeat", carol, api.HeartbeatRequest{}, http.StatusOK, &hb)
		if !hb.Lease.LastTouchedAt.Equal(e.clock.Now()) || hb.Lease.Access != "use" {
			t.Errorf("carol's heartbeat: touched %v access %q", hb.Lease.LastTouchedAt, hb.Lease.Access)
		}
		e.fail("POST", path+"/release", carol, nil, http.StatusForbidden, api.CodeForbidden)

		// dave is in the org, which has no grant yet; then it has one.
		e.fail("GET", path, dave, nil, http.StatusNotFound, api.CodeNotFound)
		e.putShare(alice, l.ID, api.LeaseShare{Users: want.Share.Users, Org: api.ShareUse})
		if dl := e.get(dave, l.ID); dl.Access != "use" {
			t.Errorf("dave's access through the org: %q", dl.Access)
		}
		// Another org never sees an org share.
		erin := e.token("erin", "globex")
		e.fail("GET", path, erin, nil, http.StatusNotFound, api.CodeNotFound)
		if got := e.sharedWith(erin); len(got) != 0 {
			t.Errorf("shared with erin of another org: %v", got)
		}

		// The owner is shown the share, and its own key.
		if al := e.get(alice, l.ID); al.Access != "owner" || al.Share == nil || al.Share.Org != api.ShareUse || al.AccessKey == "" {
			t.Errorf("alice's view: access %q share %+v key %q", al.Access, al.Share, al.AccessKey)
		}
		// An admin acting on it is owner, without the owner's key.
		if ad := e.get(adminToken, l.ID); ad.Access != "owner" || ad.Share == nil || ad.AccessKey != "" {
			t.Errorf("admin's view: access %q share %v key %q", ad.Access, ad.Share, ad.AccessKey)
		}

		// bob manages: he sees and changes the share, and may release.
		e.putShare(alice, l.ID, api.LeaseShare{Users: map[string]api.ShareRole{"bob": api.ShareManage, "carol": api.ShareUse}, Org: api.ShareUse})
		if bl := e.get(bob, l.ID); bl.Access != "manage" || bl.Share == nil {
			t.Errorf("bob manages: access %q share %v", bl.Access, bl.Share)
		}
		var del api.ShareResponse
		e.do("DELETE", path+"/share", bob, api.ShareDeleteRequest{Org: true}, http.StatusOK, &del)
		if del.Share.Org != "" || len(del.Share.Users) != 2 || del.Share.UpdatedBy != "bob" {
			t.Errorf("after bob removed the org: %+v", del.Share)
		}
		e.fail("GET", path, dave, nil, http.StatusNotFound, api.CodeNotFound)
		var rel api.LeaseResponse
		e.do("POST", path+"/release", bob, api.ReleaseRequest{}, http.StatusOK, &rel)
		if rel.Lease.State != api.LeaseReleased || rel.Lease.Access != "manage" {
			t.Errorf("bob's release: %s, access %q", rel.Lease.State, rel.Lease.Access)
		}
		// A share ends with its lease.
		for _, tok := range []string{bob, carol} {
			e.fail("GET", path, tok, nil, http.StatusNotFound, api.CodeNotFound)
			if got := e.sharedWith(tok); len(got) != 0 {
				t.Errorf("shared after release: %v", got)
			}
		}
		if al := e.get(alice, l.ID); al.State != api.LeaseReleased {
			t.Errorf("alice's released lease: %s", al.State)
		}
	})
}

// TestShareBadInput: a bad share is refused naming what is wrong, and
// changes nothing.
func TestShareBadInput(t *testing.T) {
	eachStore(t, func(t *testing.T, open opener) {
		e := simple(t, open)
		alice := e.token("alice", "acme")
		l := e.create(alice, leaseReq(t))
		before := e.putShare(alice, l.ID, api.LeaseShare{Users: map[string]api.ShareRole{"bob": api.ShareUse}})
		e.clock.Advance(time.Minute)
		path := leasePath(l.ID, "/share")
		for _, c := range []struct {
			name, method string
			body         any
			says         string
		}{
			{"unknown role", "PUT", map[string]any{"users": map[string]string{"carol": "admin"}}, `role "admin"`},
			{"unknown org role", "PUT", map[string]any{"org": "owner"}, `org role "owner"`},
			{"empty user", "PUT", map[string]any{"users": map[string]string{" ": "use"}}, "empty"},
			{"control character in a user", "PUT", `{"users":{"bo\u0001b":"use"}}`, "control characters"},
			{"users not an object", "PUT", `{"users":["bob"]}`, "users"},
			{"no body", "PUT", nil, "empty"},
			{"blank user", "DELETE", map[string]any{"user": "  "}, `"user"`},
		} {
			ae := e.fail(c.method, path, alice, c.body, http.StatusBadRequest, api.CodeInvalidRequest)
			if !strings.Contains(ae.Message, c.says) {
				t.Errorf("%s: message %q does not say %q", c.name, ae.Message, c.says)
			}
		}
		var after api.ShareResponse
		e.do("GET", path, alice, nil, http.StatusOK, &after)
		if diff := cmp.Diff(before, after); diff != "" {
			t.Errorf("share changed by bad input (-before +after):\n%s", diff)
		}
		e.fail("GET", leasePath("cbx_ffffffffffff", "/share"), alice, nil, http.StatusNotFound, api.CodeNotFound)
		e.fail("GET", "/v1/leases?shared=yes", alice, nil, http.StatusBadRequest, api.CodeInvalidRequest)
	})
}

// TestShareRevokeClosesBridges: a share change, a release and an expiry
// end at once the bridges whose identity lost what they need, and the
// next request of a revoked user is 404.
func TestShareRevokeClosesBridges(t *testing.T) {
	eachStore(t, func(t *testing.T, open opener) {
		e := simple(t, open)
		alice, carol := e.token("alice", "acme"), e.token("carol", "globex")
		bobID, carolID := auth.Identity{Owner: "bob", Org: "acme"}, auth.Identity{Owner: "carol", Org: "globex"}
		l := e.create(alice, leaseReq(t))
		e.putShare(alice, l.ID, api.LeaseShare{Users: map[string]api.ShareRole{"bob": api.ShareUse, "carol": api.ShareUse}})

		ctx := t.Context()
		carolBridge, carolDone, ok := e.srv.OpenBridge(ctx, l.ID, carolID, "use")
		defer carolDone()
		bobUse, bobUseDone, _ := e.srv.OpenBridge(ctx, l.ID, bobID, "use")
		defer bobUseDone()
		bobRead, bobReadDone, _ := e.srv.OpenBridge(ctx, l.ID, bobID, "read")
		defer bobReadDone()
		if !ok {
			t.Fatal("bridge refused")
		}

		// carol is removed, bob drops to read.
		var del api.ShareResponse
		e.do("DELETE", leasePath(l.ID, "/share"), alice, api.ShareDeleteRequest{User: "Carol"}, http.StatusOK, &del)
		revoked(t, "carol's bridge after her share was removed", carolBridge)
		e.fail("GET", leasePath(l.ID, ""), carol, nil, http.StatusNotFound, api.CodeNotFound)
		stillOpen := func(name string, ctx context.Context) {
			t.Helper()
			if ctx.Err() != nil {
				t.Errorf("%s closed: %v", name, context.Cause(ctx))
			}
		}
		stillOpen("bob's use bridge while he may still use", bobUse)
		e.putShare(alice, l.ID, api.LeaseShare{Users: map[string]api.ShareRole{"bob": api.ShareRead}})
		revoked(t, "bob's use bridge after he dropped to read", bobUse)
		stillOpen("bob's read bridge", bobRead)

		// The owner's bridges stay through share changes; a release
		// ends every bridge that works on the box.
		aliceID := auth.Identity{Owner: "alice", Org: "acme"}
		aliceBridge, aliceDone, _ := e.srv.OpenBridge(ctx, l.ID, aliceID, "use")
		defer aliceDone()
		var cleared api.ShareResponse
		e.do("DELETE", leasePath(l.ID, "/share"), alice, nil, http.StatusOK, &cleared)
		if !cleared.Share.Empty() || !cleared.Share.UpdatedAt.IsZero() {
			t.Errorf("share after clearing: %+v", cleared.Share)
		}
		revoked(t, "bob's read bridge after the share was cleared", bobRead)
		stillOpen("alice's bridge", aliceBridge)
		e.do("POST", leasePath(l.ID, "/release"), alice, api.ReleaseRequest{}, http.StatusOK, nil)
		revoked(t, "alice's bridge after the release", aliceBridge)

		// An expiry found by maintenance ends the bridges of a lease too.
		l2 := e.create(alice, leaseReq(t))
		e.putShare(alice, l2.ID, api.LeaseShare{Users: map[string]api.ShareRole{"carol": api.ShareUse}})
		b2, done2, _ := e.srv.OpenBridge(ctx, l2.ID, carolID, "use")
		defer done2()
		e.clock.Advance(time.Duration(l2.TTLSeconds+1) * time.Second)
		if _, err := e.srv.Maintain(ctx); err != nil {
			t.Fatal(err)
		}
		revoked(t, "carol's bridge after the lease expired", b2)
		e.fail("GET", leasePath(l2.ID, ""), carol, nil, http.StatusNotFound, api.CodeNotFound)
	})
}

// revoked fails t unless bridge ctx was closed because access was
// revoked (closing is synchronous with the change: no waiting).
func revoked(t *testing.T, name string, ctx context.Context) {
	t.Helper()
	if !errors.Is(context.Cause(ctx), coordinator.ErrBridgeRevoked) {
		t.Errorf("%s: cause %v, want the bridge revoked", name, context.Cause(ctx))
	}
}

// TestShareSSHLogin: the SSH login the coordinator mints goes to a user
// who may use the lease, never to a reader.
func TestShareSSHLogin(t *testing.T) {
	eachStore(t, func(t *testing.T, open opener) {
		e, lf, _ := loginEnv(t, open)
		alice, bob, carol := e.token("alice", "acme"), e.token("bob", "acme"), e.token("carol", "globex")
		l := e.create(alice, loginReq(t))
		e.putShare(alice, l.ID, api.LeaseShare{Users: map[string]api.ShareRole{"bob": api.ShareRead, "carol": api.ShareUse}})
		minted, _ := lf.issued()

		bl := e.get(bob, l.ID)
		if bl.SSHUser != "" || bl.Host != "" || !bl.SSHLoginExpiresAt.IsZero() {
			t.Errorf("a reader got connect fields: %+v", connectOf(bl))
		}
		if n, _ := lf.issued(); n != minted {
			t.Errorf("a reader's answer minted a login (%d, was %d)", n, minted)
		}
		cl := e.get(carol, l.ID)
		if !strings.HasPrefix(cl.SSHUser, secretPrefix) || cl.SSHLoginExpiresAt.IsZero() {
			t.Errorf("a user who may use the lease got no login: %+v", connectOf(cl))
		}
		var hb api.LeaseResponse
		e.do("POST", leasePath(l.ID, "/heartbeat"), carol, api.HeartbeatRequest{}, http.StatusOK, &hb)
		if !strings.HasPrefix(hb.Lease.SSHUser, secretPrefix) {
			t.Errorf("carol's heartbeat answer has no login: %+v", connectOf(hb.Lease))
		}
		var list api.LeasesResponse
		e.do("GET", "/v1/leases?shared=true", bob, nil, http.StatusOK, &list)
		if len(list.Leases) != 1 || list.Leases[0].SSHUser != "" || list.Leases[0].Host != "" {
			t.Errorf("a reader's shared list shows connect fields: %+v", list.Leases)
		}
	})
}

// TestShareRuns: a run on a shared lease is readable by those it is
// shared with, and writable only by its owner.
func TestShareRuns(t *testing.T) {
	eachStore(t, func(t *testing.T, open opener) {
		e := simple(t, open)
		alice, bob, carol := e.token("alice", "acme"), e.token("bob", "acme"), e.token("carol", "acme")
		l := e.create(alice, leaseReq(t))
		var run api.RunResponse
		e.do("POST", "/v1/runs", alice, api.RunRequest{LeaseID: l.ID, Provider: fakeProvider, Command: []string{"make"}}, http.StatusCreated, &run)
		e.do("POST", "/v1/runs/"+run.Run.ID+"/events", alice, api.EventRequest{Type: api.EventPhase, Phase: api.PhaseSync}, http.StatusCreated, nil)
		runPath := "/v1/runs/" + run.Run.ID

		e.fail("GET", runPath, bob, nil, http.StatusNotFound, api.CodeNotFound)
		e.putShare(alice, l.ID, api.LeaseShare{Users: map[string]api.ShareRole{"bob": api.ShareRead, "carol": api.ShareUse}})
		e.do("GET", runPath, bob, nil, http.StatusOK, nil)
		e.do("GET", runPath+"/events", bob, nil, http.StatusOK, nil)
		e.do("GET", runPath+"/logs", bob, nil, http.StatusOK, nil)
		e.fail("POST", runPath+"/events", bob, api.EventRequest{Type: api.EventPhase, Phase: api.PhaseCommand}, http.StatusForbidden, api.CodeForbidden)
		e.fail("POST", runPath+"/finish", bob, api.FinishRequest{}, http.StatusForbidden, api.CodeForbidden)
		// A reader may not start runs on the lease; a user may, and the
		// lease's runs list shows every run on it to both.
		e.fail("POST", "/v1/runs", bob, api.RunRequest{LeaseID: l.ID, Provider: fakeProvider, Command: []string{"make"}}, http.StatusForbidden, api.CodeForbidden)
		var carolRun api.RunResponse
		e.do("POST", "/v1/runs", carol, api.RunRequest{LeaseID: l.ID, Provider: fakeProvider, Command: []string{"make"}}, http.StatusCreated, &carolRun)
		for _, tok := range []string{alice, bob} {
			var runs api.RunsResponse
			e.do("GET", "/v1/runs?leaseID="+l.ID, tok, nil, http.StatusOK, &runs)
			if len(runs.Runs) != 2 {
				t.Errorf("the lease's runs: %d, want both", len(runs.Runs))
			}
		}

		// Revoked: the next read is 404.
		e.do("DELETE", leasePath(l.ID, "/share"), alice, api.ShareDeleteRequest{User: "bob"}, http.StatusOK, nil)
		e.fail("GET", runPath, bob, nil, http.StatusNotFound, api.CodeNotFound)
		e.fail("GET", runPath+"/logs", bob, nil, http.StatusNotFound, api.CodeNotFound)
	})
}

// TestShareGoClient drives the share routes with the Go client.
func TestShareGoClient(t *testing.T) {
	eachStore(t, func(t *testing.T, open opener) {
		e := simple(t, open)
		l := e.create(e.token("alice", "acme"), leaseReq(t))
		newClient := func(owner, org string) *client.Client {
			c, err := client.New(e.url, e.token(owner, org), client.WithClock(e.clock))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(c.CloseIdleConnections)
			return c
		}
		alice, bob := newClient("alice", "acme"), newClient("bob", "globex")
		ctx := t.Context()

		if _, err := alice.UpdateLeaseShare(ctx, l.ID, api.LeaseShare{Users: map[string]api.ShareRole{"bob": "owner"}}); err == nil {
			t.Error("UpdateLeaseShare with a bad role: no error")
		}
		res, err := alice.UpdateLeaseShare(ctx, l.Slug, api.LeaseShare{Users: map[string]api.ShareRole{"BOB": api.ShareManage}, Org: api.ShareRead})
		sh := res.Share
		if err != nil || res.LeaseID != l.ID || sh.Users["bob"] != api.ShareManage || sh.Org != api.ShareRead || sh.UpdatedBy != "alice" {
			t.Fatalf("UpdateLeaseShare = %+v, %v", sh, err)
		}
		got, err := bob.LeaseShare(ctx, l.ID)
		if err != nil || !cmp.Equal(res, got) {
			t.Errorf("LeaseShare = %+v, %v; want %+v", got, err, res)
		}
		ls, err := bob.SharedLeases(ctx, 0)
		if err != nil || len(ls) != 1 || ls[0].ID != l.ID || ls[0].Access != "manage" {
			t.Errorf("SharedLeases = %+v, %v", ls, err)
		}
		res, err = bob.DeleteLeaseShare(ctx, l.ID, api.ShareDeleteRequest{Org: true})
		sh = res.Share
		if err != nil || sh.Org != "" || sh.Users["bob"] != api.ShareManage {
			t.Errorf("DeleteLeaseShare(org) = %+v, %v", sh, err)
		}
		if res, err = alice.DeleteLeaseShare(ctx, l.ID, api.ShareDeleteRequest{}); err != nil || !res.Share.Empty() {
			t.Errorf("DeleteLeaseShare(all) = %+v, %v", res, err)
		}
		if _, err := bob.LeaseShare(ctx, l.ID); !client.IsCode(err, api.CodeNotFound) {
			t.Errorf("LeaseShare after the share was cleared: %v, want not_found", err)
		}
		if ls, err := bob.SharedLeases(ctx, 0); err != nil || len(ls) != 0 {
			t.Errorf("SharedLeases after the share was cleared = %+v, %v", ls, err)
		}
	})
}

// A user who follows a shared lease's run over the control websocket
// stops getting its events the moment the share is revoked: the next
// event brings an error for the run instead, and nothing after it.
func TestShareRevokeStopsRunSubscription(t *testing.T) {
	eachStore(t, func(t *testing.T, open opener) {
		e := simple(t, open)
		alice, bob := e.token("alice", "acme"), e.token("bob", "globex")
		l := e.create(alice, leaseReq(t))
		var run api.RunResponse
		e.do("POST", "/v1/runs", alice, api.RunRequest{LeaseID: l.ID, Provider: fakeProvider, Command: []string{"make"}}, http.StatusCreated, &run)
		runID := run.Run.ID
		e.appendEvents(alice, runID, 1)
		e.putShare(alice, l.ID, api.LeaseShare{Users: map[string]api.ShareRole{"bob": api.ShareRead}})

		b := openControl(t, e.url, bob)
		b.send(map[string]any{"type": "subscribe_run", "runID": runID})
		if got := b.seqs(runID, 1); !cmp.Equal(got, []int{1}) {
			t.Fatalf("bob's backlog = %v, want [1]", got)
		}
		e.appendEvents(alice, runID, 1)
		if got := b.seqs(runID, 2); !cmp.Equal(got, []int{2}) {
			t.Fatalf("bob's pushed events = %v, want [2]", got)
		}

		e.do("DELETE", leasePath(l.ID, "/share"), alice, api.ShareDeleteRequest{User: "bob"}, http.StatusOK, nil)
		e.appendEvents(alice, runID, 1)
		if got, up := b.recv(); got.Type != api.ControlError || up.Code != api.CodeNotFound || got.RunID != runID {
			t.Fatalf("bob after the revoke: %+v, want error not_found for the run", got)
		}
		e.appendEvents(alice, runID, 1)
		b.send(map[string]any{"type": "ping"})
		if got, _ := b.recv(); got.Type != api.ControlPong {
			t.Errorf("bob got %+v after the subscription ended, want only his pong", got)
		}
	})
}
