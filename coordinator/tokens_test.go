package coordinator_test

import (
	"context"
	"net/http"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/jonboulle/clockwork"

	"github.com/crabbox-dev/crabbox/coordinator"
	"github.com/crabbox-dev/crabbox/coordinator/api"
	"github.com/crabbox-dev/crabbox/coordinator/auth"
	"github.com/crabbox-dev/crabbox/coordinator/store/sqlite"
)

// tokenID is the jti of a user token.
func tokenID(t *testing.T, token string) string {
	t.Helper()
	c, err := auth.ParseUserToken([]byte(sessionSecret), token, start)
	if err != nil {
		t.Fatal(err)
	}
	return c.ID
}

func TestTokensIssueListRevoke(t *testing.T) {
	eachStore(t, func(t *testing.T, open opener) {
		e := simple(t, open)
		ctx := context.Background()
		alice, err := e.srv.IssueUserToken(ctx, "alice", "acme", "alice", "github", 12*time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		alice2, err := e.srv.IssueUserToken(ctx, "alice", "acme", "alice", "github", time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		bob, err := e.srv.IssueUserToken(ctx, "bob", "", "bob", "github", time.Hour)
		if err != nil {
			t.Fatal(err)
		}

		var mine api.TokensResponse
		e.do("GET", "/v1/tokens", alice, nil, http.StatusOK, &mine)
		want := []api.Token{
			{ID: tokenID(t, alice2), Owner: "alice", Org: "acme", Login: "alice", Source: "github", CreatedAt: start, ExpiresAt: start.Add(time.Hour)},
			{ID: tokenID(t, alice), Owner: "alice", Org: "acme", Login: "alice", Source: "github", CreatedAt: start, ExpiresAt: start.Add(12 * time.Hour), Current: true},
		}
		// Same creation second: newest first is by ID then.
		sortTokens := cmpopts.SortSlices(func(a, b api.Token) bool { return a.ID < b.ID })
		if diff := cmp.Diff(want, mine.Tokens, sortTokens); diff != "" {
			t.Errorf("alice's tokens (-want +got):\n%s", diff)
		}

		// Bob cannot see or revoke alice's token; only admins list all.
		e.fail("POST", "/v1/tokens/"+tokenID(t, alice)+"/revoke", bob, struct{}{}, http.StatusNotFound, api.CodeNotFound)
		e.fail("GET", "/v1/admin/tokens", bob, nil, http.StatusForbidden, api.CodeForbidden)
		e.fail("POST", "/v1/tokens/not-a-uuid/revoke", bob, struct{}{}, http.StatusBadRequest, api.CodeInvalidRequest)
		var all api.TokensResponse
		e.do("GET", "/v1/admin/tokens", adminToken, nil, http.StatusOK, &all)
		if len(all.Tokens) != 3 {
			t.Errorf("admin sees %d tokens, want 3", len(all.Tokens))
		}
		e.do("GET", "/v1/admin/tokens?owner=bob", adminToken, nil, http.StatusOK, &all)
		if len(all.Tokens) != 1 || all.Tokens[0].Org != "acme" {
			t.Errorf("bob's tokens as the admin sees them: %+v", all.Tokens)
		}

		// Alice revokes her second token; it is refused at once, the first
		// still works, and revoking again answers the same.
		e.do("GET", "/v1/whoami", alice2, nil, http.StatusOK, nil)
		var rev api.TokenResponse
		e.do("POST", "/v1/tokens/"+tokenID(t, alice2)+"/revoke", alice, struct{}{}, http.StatusOK, &rev)
		if !rev.Token.Revoked || rev.Token.RevokedBy != "alice" || !rev.Token.RevokedAt.Equal(start) {
			t.Errorf("revoked token: %+v", rev.Token)
		}
		e.fail("GET", "/v1/whoami", alice2, nil, http.StatusUnauthorized, api.CodeUnauthorized)
		e.fail("POST", "/v1/leases/cbx_000000000001/heartbeat", alice2, struct{}{}, http.StatusUnauthorized, api.CodeUnauthorized)
		e.do("GET", "/v1/whoami", alice, nil, http.StatusOK, nil)
		e.do("POST", "/v1/tokens/"+tokenID(t, alice2)+"/revoke", alice, struct{}{}, http.StatusOK, &rev)

		// A token minted offline is not in the registry: its owner may
		// revoke it (it is the token they call with), and so may an admin,
		// by ID alone; it is refused after.
		offline, offline2 := e.token("carol", "acme"), e.token("carol", "acme")
		e.do("POST", "/v1/tokens/"+tokenID(t, offline)+"/revoke", offline, struct{}{}, http.StatusOK, nil)
		e.fail("GET", "/v1/whoami", offline, nil, http.StatusUnauthorized, api.CodeUnauthorized)
		e.do("GET", "/v1/whoami", offline2, nil, http.StatusOK, nil)
		e.fail("POST", "/v1/tokens/"+tokenID(t, offline2)+"/revoke", alice, struct{}{}, http.StatusNotFound, api.CodeNotFound)
		e.do("POST", "/v1/tokens/"+tokenID(t, offline2)+"/revoke", adminToken, struct{}{}, http.StatusOK, &rev)
		if rev.Token.Owner != "" || !rev.Token.Revoked {
			t.Errorf("tombstone: %+v", rev.Token)
		}
		e.fail("GET", "/v1/whoami", offline2, nil, http.StatusUnauthorized, api.CodeUnauthorized)
		// An admin revokes bob's registered token.
		e.do("POST", "/v1/tokens/"+tokenID(t, bob)+"/revoke", adminToken, struct{}{}, http.StatusOK, nil)
		e.fail("GET", "/v1/whoami", bob, nil, http.StatusUnauthorized, api.CodeUnauthorized)
		// Static tokens are unaffected.
		e.do("GET", "/v1/whoami", sharedToken, nil, http.StatusOK, nil)
	})
}

// TestRevocationReachesOtherReplicas: a coordinator sharing the store
// refuses a token another one revoked once its revoked set is older than
// RevocationRefresh.
func TestRevocationReachesOtherReplicas(t *testing.T) {
	eachStore(t, func(t *testing.T, open opener) {
		clock := clockwork.NewFakeClockAt(start)
		a := newEnv(t, open(t), clock, newFake())
		b := newEnv(t, open(t), clock, newFake())
		tok, err := a.srv.IssueUserToken(context.Background(), "alice", "acme", "alice", "github", time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		b.do("GET", "/v1/whoami", tok, nil, http.StatusOK, nil) // b loads its set
		a.do("POST", "/v1/tokens/"+tokenID(t, tok)+"/revoke", tok, struct{}{}, http.StatusOK, nil)
		a.fail("GET", "/v1/whoami", tok, nil, http.StatusUnauthorized, api.CodeUnauthorized)
		clock.Advance(coordinator.RevocationRefresh)
		b.fail("GET", "/v1/whoami", tok, nil, http.StatusUnauthorized, api.CodeUnauthorized)
	})
}

func TestIssueUserTokenNeedsSecret(t *testing.T) {
	st, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "coordinator.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	srv, err := coordinator.New(coordinator.Config{
		Store:  st,
		Tokens: auth.Config{AdminToken: adminToken, DefaultOrg: "acme"},
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := srv.IssueUserToken(context.Background(), "alice", "acme", "alice", "github", time.Hour); err == nil {
		t.Error("IssueUserToken without a session secret: no error")
	}
}

// POST /v1/tokens/current/revoke revokes the token the request uses (what
// crabbox logout calls): refused from then on, its other tokens untouched;
// static tokens cannot revoke themselves.
func TestRevokeCurrentToken(t *testing.T) {
	eachStore(t, func(t *testing.T, open opener) {
		e := simple(t, open)
		ctx := context.Background()
		alice, err := e.srv.IssueUserToken(ctx, "alice", "acme", "alice", "github", time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		other, err := e.srv.IssueUserToken(ctx, "alice", "acme", "alice", "github", time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		var got api.TokenResponse
		e.do("POST", "/v1/tokens/current/revoke", alice, struct{}{}, http.StatusOK, &got)
		want := api.Token{ID: tokenID(t, alice), Owner: "alice", Org: "acme", Login: "alice", Source: "github",
			CreatedAt: start, ExpiresAt: start.Add(time.Hour), Revoked: true, RevokedAt: start, RevokedBy: "alice", Current: true}
		if diff := cmp.Diff(want, got.Token); diff != "" {
			t.Errorf("revoked token (-want +got):\n%s", diff)
		}
		e.fail("GET", "/v1/whoami", alice, nil, http.StatusUnauthorized, api.CodeUnauthorized)
		e.fail("POST", "/v1/tokens/current/revoke", alice, struct{}{}, http.StatusUnauthorized, api.CodeUnauthorized)
		e.do("GET", "/v1/whoami", other, nil, http.StatusOK, nil)

		// A token minted offline (not in the registry) revokes itself too.
		offline := e.token("carol", "acme")
		e.do("POST", "/v1/tokens/current/revoke", offline, struct{}{}, http.StatusOK, nil)
		e.fail("GET", "/v1/whoami", offline, nil, http.StatusUnauthorized, api.CodeUnauthorized)

		for _, static := range []string{adminToken, sharedToken} {
			e.fail("POST", "/v1/tokens/current/revoke", static, struct{}{}, http.StatusBadRequest, api.CodeTokenNotRevocable)
			e.do("GET", "/v1/whoami", static, nil, http.StatusOK, nil)
		}
	})
}
