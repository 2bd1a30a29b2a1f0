package coordinator_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/crabbox-dev/crabbox/coordinator"
	"github.com/crabbox-dev/crabbox/coordinator/api"
	"github.com/crabbox-dev/crabbox/coordinator/github"
	"github.com/crabbox-dev/crabbox/coordinator/github/githubtest"
)

// withGitHub serves the device flow against a fake GitHub where alice is
// an active member of acme and bob only invited.
func withGitHub(t *testing.T) (option, *githubtest.Server, githubtest.User, githubtest.User) {
	gh, client, alice, bob := githubtest.Acme(t)
	return func(c *coordinator.Config) { c.GitHub = client }, gh, alice, bob
}

// crabbox login's device flow: the coordinator starts the sign-in at
// GitHub, answers each poll with one question to GitHub, and issues an
// allowed user a recorded token; a denied user, an expired code and a
// declined sign-in get no token.
func TestDeviceFlow(t *testing.T) {
	eachStore(t, func(t *testing.T, open opener) {
		opt, gh, alice, bob := withGitHub(t)
		e := simple(t, open, opt)

		var start api.DeviceStart
		e.do("POST", "/v1/auth/device", "", nil, http.StatusOK, &start)
		if start.DeviceCode == "" || start.UserCode != "ABCD-1234" || start.VerificationURI != gh.URL+"/login/device" || start.IntervalSeconds != 5 {
			t.Fatalf("device start = %+v", start)
		}
		poll := api.DeviceTokenRequest{DeviceCode: start.DeviceCode}
		gh.DevicePolls("pending", "slow_down", alice.Token, bob.Token, "expired", "denied")
		for _, want := range []string{api.DevicePendingStatus, api.DeviceSlowDownStatus} {
			var p api.DevicePending
			e.do("POST", "/v1/auth/device/token", "", poll, http.StatusAccepted, &p)
			if p.Status != want {
				t.Errorf("poll = %q, want %q", p.Status, want)
			}
		}
		var tok api.DeviceToken
		e.do("POST", "/v1/auth/device/token", "", poll, http.StatusOK, &tok)
		if tok.Owner != "alice" || tok.Org != "acme" || tok.Login != "alice" || !tok.ExpiresAt.Equal(e.clock.Now().Add(coordinator.DefaultDeviceTokenTTL)) {
			t.Fatalf("device token = %+v", tok)
		}
		var who api.Whoami
		e.do("GET", "/v1/whoami", tok.Token, nil, http.StatusOK, &who)
		if who.Owner != "alice" || who.Org != "acme" {
			t.Errorf("whoami with the new token = %+v", who)
		}
		var tokens struct{ Tokens []api.Token }
		e.do("GET", "/v1/tokens", tok.Token, nil, http.StatusOK, &tokens)
		if len(tokens.Tokens) != 1 || tokens.Tokens[0].Source != coordinator.TokenSourceDevice || !tokens.Tokens[0].Current {
			t.Errorf("tokens after the device sign-in = %+v", tokens.Tokens)
		}

		if ae := e.fail("POST", "/v1/auth/device/token", "", poll, http.StatusForbidden, api.CodeForbidden); ae.Message == "" {
			t.Error("denied user: empty message")
		}
		e.fail("POST", "/v1/auth/device/token", "", poll, http.StatusGone, api.CodeDeviceExpired)
		e.fail("POST", "/v1/auth/device/token", "", poll, http.StatusForbidden, api.CodeForbidden)
		e.fail("POST", "/v1/auth/device/token", "", api.DeviceTokenRequest{}, http.StatusBadRequest, api.CodeInvalidRequest)
	})
}

// Without GitHub configured there is no device flow.
func TestDeviceFlowNotConfigured(t *testing.T) {
	eachStore(t, func(t *testing.T, open opener) {
		e := simple(t, open)
		e.fail("POST", "/v1/auth/device", "", nil, http.StatusNotFound, api.CodeNotFound)
		e.fail("POST", "/v1/auth/device/token", "", api.DeviceTokenRequest{DeviceCode: "x"}, http.StatusNotFound, api.CodeNotFound)
	})
}

// A device-flow token's user is checked with GitHub again by the
// maintenance loop once the recheck interval passed: removed from the org,
// the token is revoked and refused.
func TestDeviceTokenRecheck(t *testing.T) {
	eachStore(t, func(t *testing.T, open opener) {
		opt, gh, alice, _ := withGitHub(t)
		e := simple(t, open, opt)
		signIn := func() string {
			t.Helper()
			var start api.DeviceStart
			e.do("POST", "/v1/auth/device", "", nil, http.StatusOK, &start)
			gh.DevicePolls(alice.Token)
			var tok api.DeviceToken
			e.do("POST", "/v1/auth/device/token", "", api.DeviceTokenRequest{DeviceCode: start.DeviceCode}, http.StatusOK, &tok)
			return tok.Token
		}
		maintain := func() {
			t.Helper()
			if _, err := e.srv.Maintain(t.Context()); err != nil {
				t.Fatal(err)
			}
		}
		token := signIn()
		gh.SetOrg("acme", "alice", "")
		maintain() // not due yet
		e.do("GET", "/v1/whoami", token, nil, http.StatusOK, nil)

		e.clock.Advance(coordinator.DefaultTokenRecheckInterval + time.Second)
		maintain()
		e.fail("GET", "/v1/whoami", token, nil, http.StatusUnauthorized, api.CodeUnauthorized)
		var tokens struct{ Tokens []api.Token }
		e.do("GET", "/v1/admin/tokens", adminToken, nil, http.StatusOK, &tokens)
		if len(tokens.Tokens) != 1 || !tokens.Tokens[0].Revoked || !strings.HasPrefix(tokens.Tokens[0].RevokedBy, "github: ") {
			t.Errorf("tokens after the recheck = %+v", tokens.Tokens)
		}

		// Back in the org, a GitHub that revoked its own credential gets
		// the same.
		gh.SetOrg("acme", "alice", "active")
		token = signIn()
		gh.RevokeToken(alice)
		e.clock.Advance(coordinator.DefaultTokenRecheckInterval + time.Second)
		maintain()
		e.fail("GET", "/v1/whoami", token, nil, http.StatusUnauthorized, api.CodeUnauthorized)
	})
}

// roundTripFunc is an http.RoundTripper made of a func.
type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// Device-flow requests need no token and each ask GitHub: beyond
// MaxDeviceSignIns at once, more get 429 instead of piling up.
func TestDeviceFlowBusy(t *testing.T) {
	eachStore(t, func(t *testing.T, open opener) {
		gh, _, _, _ := githubtest.Acme(t)
		entered, release := make(chan struct{}, 1), make(chan struct{})
		slow := &http.Client{Transport: roundTripFunc(func(r *http.Request) (*http.Response, error) {
			entered <- struct{}{}
			<-release
			return gh.Client().Transport.RoundTrip(r)
		})}
		client, err := github.New(github.Config{
			ClientID: githubtest.ClientID, ClientSecret: githubtest.ClientSecret,
			WebURL: gh.URL, APIURL: gh.APIURL, Orgs: []string{"acme"}, HTTPClient: slow,
		})
		if err != nil {
			t.Fatal(err)
		}
		e := simple(t, open, func(c *coordinator.Config) { c.GitHub, c.MaxDeviceSignIns = client, 1 })

		first := make(chan int, 1)
		go func() {
			resp, err := http.Post(e.url+"/v1/auth/device", "application/json", nil)
			if err != nil {
				first <- 0
				return
			}
			resp.Body.Close()
			first <- resp.StatusCode
		}()
		<-entered // the first request is asking GitHub
		e.fail("POST", "/v1/auth/device", "", nil, http.StatusTooManyRequests, api.CodeTooManyRequests)
		e.fail("POST", "/v1/auth/device/token", "", api.DeviceTokenRequest{DeviceCode: "dev-123"}, http.StatusTooManyRequests, api.CodeTooManyRequests)
		close(release)
		if got := <-first; got != http.StatusOK {
			t.Errorf("the first device sign-in: status %d, want 200", got)
		}
	})
}

// GitHub's client errors about a device code are the client's: 4xx with
// GitHub's reason, not 502 "GitHub did not answer". A refusal of the
// coordinator's OAuth app stays a 502 that names GitHub's reason.
func TestDevicePollRefusals(t *testing.T) {
	eachStore(t, func(t *testing.T, open opener) {
		opt, gh, _, _ := withGitHub(t)
		e := simple(t, open, opt)
		for _, c := range []struct {
			answer, code, deviceCode string
			status                   int
			says                     string
		}{
			{"unknown", api.CodeDeviceCodeRejected, "dev-123", http.StatusBadRequest, "incorrect_device_code"},
			{"", api.CodeDeviceCodeRejected, "dev-never-issued", http.StatusBadRequest, "incorrect_device_code"},
			{"http404", api.CodeDeviceCodeRejected, "dev-123", http.StatusBadRequest, "http_404"},
			{"expired", api.CodeDeviceExpired, "dev-123", http.StatusGone, "expired_token"},
			{"denied", api.CodeForbidden, "dev-123", http.StatusForbidden, "access_denied"},
			{"disabled", api.CodeUpstream, "dev-123", http.StatusBadGateway, "device_flow_disabled"},
		} {
			gh.DevicePolls(c.answer)
			ae := e.fail("POST", "/v1/auth/device/token", "", api.DeviceTokenRequest{DeviceCode: c.deviceCode}, c.status, c.code)
			if !strings.Contains(ae.Message, c.says) {
				t.Errorf("answer %q: message %q does not say %q", c.answer, ae.Message, c.says)
			}
		}
	})
}
