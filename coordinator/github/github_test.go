package github_test

import (
	"errors"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"
	"golang.org/x/oauth2"

	"github.com/crabbox-dev/crabbox/coordinator/github"
	"github.com/crabbox-dev/crabbox/coordinator/github/githubtest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// newFake is a fake GitHub with alice (active in acme and its infra team)
// and bob (invited to acme, active in other).
func newFake(t *testing.T) (gh *githubtest.Server, alice, bob githubtest.User) {
	gh = githubtest.Start(t)
	alice, bob = gh.AddUser("alice", 1), gh.AddUser("bob", 2)
	gh.SetOrg("acme", "alice", "active")
	gh.SetOrg("acme", "bob", "pending")
	gh.SetOrg("other", "bob", "active")
	gh.SetTeam("acme/infra", "alice", "active")
	return gh, alice, bob
}

func client(t *testing.T, gh *githubtest.Server, orgs, teams []string) *github.Client {
	t.Helper()
	c, err := github.New(github.Config{
		ClientID: githubtest.ClientID, ClientSecret: githubtest.ClientSecret,
		WebURL: gh.URL, APIURL: gh.APIURL,
		Orgs: orgs, Teams: teams, HTTPClient: gh.Client(),
	})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestNewRejectsBadConfig(t *testing.T) {
	tests := []struct {
		name string
		cfg  github.Config
		want string
	}{
		{"no client", github.Config{Orgs: []string{"acme"}}, "no OAuth client ID"},
		{"no orgs", github.Config{ClientID: "x"}, "no allowed orgs"},
		{"bad org", github.Config{ClientID: "x", Orgs: []string{"ac me"}}, `allowed org "ac me"`},
		{"bad team", github.Config{ClientID: "x", Orgs: []string{"acme"}, Teams: []string{"infra"}}, "want org/team-slug"},
		{"team of another org", github.Config{ClientID: "x", Orgs: []string{"acme"}, Teams: []string{"other/infra"}}, "not among the allowed orgs"},
		{"bad API URL", github.Config{ClientID: "x", Orgs: []string{"acme"}, APIURL: "ftp://x"}, "API URL"},
	}
	for _, tt := range tests {
		if _, err := github.New(tt.cfg); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: New = %v, want an error containing %q", tt.name, err, tt.want)
		}
	}
}

// Who may sign in: active members of an allowed org (the first one they
// belong to), narrowed to allowed teams when teams are configured.
func TestAuthorize(t *testing.T) {
	gh, alice, bob := newFake(t)
	tests := []struct {
		name        string
		orgs, teams []string
		token       string
		want        github.User
		denied      string
	}{
		{"member", []string{"acme"}, nil, alice.Token, github.User{Login: "alice", ID: 1, Org: "acme"}, ""},
		{"first org they are in", []string{"acme", "other"}, nil, bob.Token, github.User{Login: "bob", ID: 2, Org: "other"}, ""},
		{"invitation pending", []string{"acme"}, nil, bob.Token, github.User{}, "not an active member of any of the orgs acme"},
		{"in the team", []string{"acme"}, []string{"acme/infra"}, alice.Token, github.User{Login: "alice", ID: 1, Org: "acme"}, ""},
		{"not in the team", []string{"acme", "other"}, []string{"acme/infra"}, bob.Token, github.User{}, "not an active member of any of the teams acme/infra"},
		{"revoked token", []string{"acme"}, nil, "gho_revoked", github.User{}, "no longer accepts the user's token"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := client(t, gh, tt.orgs, tt.teams)
			got, err := c.Authorize(t.Context(), &oauth2.Token{AccessToken: tt.token})
			if tt.denied != "" {
				if !errors.Is(err, github.ErrDenied) || !strings.Contains(err.Error(), tt.denied) {
					t.Fatalf("Authorize = %+v, %v; want ErrDenied saying %q", got, err, tt.denied)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("Authorize (-want +got):\n%s", diff)
			}
		})
	}
}

// A user removed from the org (or whose GitHub token was revoked) fails the
// next check.
func TestCheckAfterRemoval(t *testing.T) {
	gh, alice, _ := newFake(t)
	c := client(t, gh, []string{"acme"}, nil)
	tok := &oauth2.Token{AccessToken: alice.Token}
	if err := c.Check(t.Context(), tok, "alice", "acme"); err != nil {
		t.Fatalf("Check of a member: %v", err)
	}
	gh.SetOrg("acme", "alice", "")
	if err := c.Check(t.Context(), tok, "alice", "acme"); !errors.Is(err, github.ErrDenied) {
		t.Errorf("Check after removal = %v, want ErrDenied", err)
	}
	gh.SetOrg("acme", "alice", "active")
	gh.RevokeToken(alice)
	if err := c.Check(t.Context(), tok, "alice", "acme"); !errors.Is(err, github.ErrDenied) {
		t.Errorf("Check with a revoked GitHub token = %v, want ErrDenied", err)
	}
}

// The device flow: one poll per call, each answer mapped to its error.
func TestDeviceFlow(t *testing.T) {
	gh, alice, _ := newFake(t)
	c := client(t, gh, []string{"acme"}, nil)
	d, err := c.StartDevice(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if d.DeviceCode != "dev-123" || d.UserCode != "ABCD-1234" || d.VerificationURI != gh.URL+"/login/device" || d.Interval.Seconds() != 5 || d.ExpiresAt.IsZero() {
		t.Fatalf("StartDevice = %+v", d)
	}
	gh.DevicePolls("pending", "slow_down", alice.Token, "expired", "denied")
	for _, want := range []error{github.ErrPending, github.ErrSlowDown} {
		if _, err := c.PollDevice(t.Context(), d.DeviceCode); !errors.Is(err, want) {
			t.Fatalf("PollDevice = %v, want %v", err, want)
		}
	}
	tok, err := c.PollDevice(t.Context(), d.DeviceCode)
	if err != nil || tok.AccessToken != alice.Token {
		t.Fatalf("PollDevice once signed in = %+v, %v", tok, err)
	}
	for _, want := range []error{github.ErrDeviceExpired, github.ErrAccessDenied} {
		if _, err := c.PollDevice(t.Context(), d.DeviceCode); !errors.Is(err, want) {
			t.Errorf("PollDevice = %v, want %v", err, want)
		}
	}
	var rejected *github.RejectedError
	if _, err := c.PollDevice(t.Context(), "dev-unknown"); !errors.As(err, &rejected) || rejected.Code != "incorrect_device_code" || !strings.Contains(rejected.Reason(), "incorrect_device_code") {
		t.Errorf("PollDevice of an unknown code = %v, want a RejectedError with GitHub's code", err)
	}
}

// GitHub's client errors about the device code are RejectedErrors; its
// refusals of the OAuth app itself are ErrAppRefused, with its reason.
func TestDevicePollRefusals(t *testing.T) {
	gh, _, _ := newFake(t)
	c := client(t, gh, []string{"acme"}, nil)
	for answer, code := range map[string]string{"unknown": "incorrect_device_code", "http404": "http_404"} {
		gh.DevicePolls(answer)
		var rejected *github.RejectedError
		if _, err := c.PollDevice(t.Context(), "dev-123"); !errors.As(err, &rejected) || rejected.Code != code {
			t.Errorf("answer %q: PollDevice = %v, want a RejectedError %q", answer, err, code)
		}
	}
	gh.DevicePolls("disabled")
	if _, err := c.PollDevice(t.Context(), "dev-123"); !errors.Is(err, github.ErrAppRefused) || !strings.Contains(err.Error(), "device_flow_disabled") {
		t.Errorf("device flow disabled: PollDevice = %v, want ErrAppRefused naming GitHub's reason", err)
	}
}

// The web flow sends the browser to GitHub with a PKCE challenge and trades
// the code, with its verifier, for the user's token.
func TestWebFlow(t *testing.T) {
	gh, alice, _ := newFake(t)
	gh.ApproveAs(alice)
	c := client(t, gh, []string{"acme"}, nil)
	verifier := oauth2.GenerateVerifier()
	const redirect = "https://crabbox.example/portal/auth/callback"
	raw := c.AuthCodeURL("state-xyz", redirect, verifier)
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	if u.Path != "/login/oauth/authorize" || q.Get("client_id") != githubtest.ClientID || q.Get("state") != "state-xyz" ||
		q.Get("redirect_uri") != redirect || q.Get("scope") != "read:org" || q.Get("code_challenge_method") != "S256" {
		t.Fatalf("AuthCodeURL = %s", raw)
	}
	if strings.Contains(raw, githubtest.ClientSecret) {
		t.Fatalf("AuthCodeURL shows the client secret: %s", raw)
	}
	// The fake's authorize page approves at once and sends the browser
	// back with a code.
	noFollow := *gh.Client()
	noFollow.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	resp, err := noFollow.Get(raw)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	back, err := url.Parse(resp.Header.Get("Location"))
	if err != nil || back.Query().Get("state") != "state-xyz" {
		t.Fatalf("authorize answered %d, Location %q", resp.StatusCode, resp.Header.Get("Location"))
	}
	code := back.Query().Get("code")

	if _, err := c.Exchange(t.Context(), code, redirect, oauth2.GenerateVerifier()); err == nil || strings.Contains(err.Error(), githubtest.ClientSecret) {
		t.Errorf("Exchange with the wrong verifier = %v, want an error without the secret", err)
	}
	tok, err := c.Exchange(t.Context(), code, redirect, verifier)
	if err != nil {
		t.Fatal(err)
	}
	user, err := c.Authorize(t.Context(), tok)
	if err != nil || user.Login != "alice" || user.Org != "acme" {
		t.Errorf("Authorize after the web flow = %+v, %v", user, err)
	}
}
