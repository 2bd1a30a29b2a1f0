package coordinator_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/crabbox-dev/crabbox/coordinator"
	"github.com/crabbox-dev/crabbox/coordinator/api"
)

// A denied device sign-in and a token revoked by the recheck say what
// GitHub answered: not a member of the org, or an invitation pending.
func TestGitHubDenialReasons(t *testing.T) {
	eachStore(t, func(t *testing.T, open opener) {
		opt, gh, alice, bob := withGitHub(t)
		carol := gh.AddUser("carol", 3)
		e := simple(t, open, opt)
		signIn := func(as string) string {
			t.Helper()
			var start api.DeviceStart
			e.do("POST", "/v1/auth/device", "", nil, http.StatusOK, &start)
			gh.DevicePolls(as)
			var tok api.DeviceToken
			e.do("POST", "/v1/auth/device/token", "", api.DeviceTokenRequest{DeviceCode: start.DeviceCode}, http.StatusOK, &tok)
			return tok.Token
		}
		denied := func(as, want string) {
			t.Helper()
			var start api.DeviceStart
			e.do("POST", "/v1/auth/device", "", nil, http.StatusOK, &start)
			gh.DevicePolls(as)
			ae := e.fail("POST", "/v1/auth/device/token", "", api.DeviceTokenRequest{DeviceCode: start.DeviceCode}, http.StatusForbidden, api.CodeForbidden)
			if !strings.Contains(ae.Message, want) {
				t.Errorf("device sign-in denied with %q, want it to say %q", ae.Message, want)
			}
		}
		denied(bob.Token, "bob's invitation to the GitHub org acme is pending: accept it at "+gh.URL+"/orgs/acme/invitation")
		denied(carol.Token, "carol is not a member of the GitHub org acme")

		token := signIn(alice.Token)
		gh.SetOrg("acme", "alice", "")
		e.clock.Advance(coordinator.DefaultTokenRecheckInterval + time.Second)
		if _, err := e.srv.Maintain(t.Context()); err != nil {
			t.Fatal(err)
		}
		e.fail("GET", "/v1/whoami", token, nil, http.StatusUnauthorized, api.CodeUnauthorized)
		var tokens struct{ Tokens []api.Token }
		e.do("GET", "/v1/admin/tokens", adminToken, nil, http.StatusOK, &tokens)
		if len(tokens.Tokens) != 1 || tokens.Tokens[0].RevokedBy != "github: alice is not a member of the GitHub org acme" {
			t.Errorf("tokens after the recheck = %+v, want one revoked saying alice is not a member of acme", tokens.Tokens)
		}
	})
}
