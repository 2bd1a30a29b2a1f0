package github_test

import (
	"errors"
	"net/http"
	"net/http/httptest"
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
// belong to), narrowed to allowed teams when teams are configured. A user
// who may not is told what GitHub answered for each allowed org.
func TestAuthorize(t *testing.T) {
	gh, alice, bob := newFake(t)
	carol := gh.AddUser("carol", 3) // in no org at all
	gh.AddUser("dave", 4)
	gh.Invite("acme", "dave", "infra")
	dave := githubtest.User{Login: "dave", ID: 4, Token: "gho_dave"}
	invite := gh.URL + "/orgs/acme/invitation"
	tests := []struct {
		name        string
		orgs, teams []string
		token       string
		want        github.User
		denied      string
	}{
		{"member", []string{"acme"}, nil, alice.Token, github.User{Login: "alice", ID: 1, Org: "acme"}, ""},
		{"first org they are in", []string{"acme", "other"}, nil, bob.Token, github.User{Login: "bob", ID: 2, Org: "other"}, ""},
		{"not a member", []string{"acme"}, nil, carol.Token, github.User{}, "carol is not a member of the GitHub org acme"},
		{"not a member of any", []string{"acme", "other"}, nil, carol.Token, github.User{},
			"carol is not a member of the GitHub org acme; carol is not a member of the GitHub org other"},
		{"invitation pending", []string{"acme"}, nil, bob.Token, github.User{},
			"bob's invitation to the GitHub org acme is pending: accept it at " + invite + ", then sign in again"},
		{"invitation with a team pending", []string{"acme"}, []string{"acme/infra"}, dave.Token, github.User{},
			"dave's invitation to the GitHub org acme is pending: accept it at " + invite + ", then sign in again"},
		{"in the team", []string{"acme"}, []string{"acme/infra"}, alice.Token, github.User{Login: "alice", ID: 1, Org: "acme"}, ""},
		{"in an org without allowed teams", []string{"acme", "other"}, []string{"acme/infra"}, bob.Token, github.User{},
			"bob's invitation to the GitHub org acme is pending: accept it at " + invite + ", then sign in again; bob is in the GitHub org other, but this coordinator admits none of its teams"},
		{"not in the team", []string{"acme"}, []string{"acme/ops"}, alice.Token, github.User{},
			"alice is in the GitHub org acme but not in its team ops"},
		{"in none of the teams", []string{"acme"}, []string{"acme/ops", "acme/web"}, alice.Token, github.User{},
			"alice is in the GitHub org acme but in none of its teams ops, web"},
		{"pending here, no team there", []string{"acme", "other"}, []string{"acme/infra", "other/web"}, bob.Token, github.User{},
			"bob's invitation to the GitHub org acme is pending: accept it at " + invite + ", then sign in again; bob is in the GitHub org other but not in its team web"},
		{"revoked token", []string{"acme"}, nil, "gho_revoked", github.User{}, "GitHub no longer accepts the user's token (revoked or expired)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := client(t, gh, tt.orgs, tt.teams)
			got, err := c.Authorize(t.Context(), &oauth2.Token{AccessToken: tt.token})
			if tt.denied != "" {
				if !errors.Is(err, github.ErrDenied) || github.DeniedReason(err) != tt.denied {
					t.Fatalf("Authorize = %+v, %v; want ErrDenied saying\n%s", got, err, tt.denied)
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
	// Once dave accepts, he is in, team included.
	gh.Accept("acme", "dave")
	got, err := client(t, gh, []string{"acme"}, []string{"acme/infra"}).Authorize(t.Context(), &oauth2.Token{AccessToken: dave.Token})
	if err != nil || got.Org != "acme" {
		t.Errorf("Authorize after accepting the invitation = %+v, %v", got, err)
	}
}

// An org that hides its memberships from the app (403) is said so, and a
// rate limit is no refusal at all.
func TestAuthorizeHiddenOrgAndRateLimit(t *testing.T) {
	gh, alice, _ := newFake(t)
	c := client(t, gh, []string{"acme"}, nil)
	gh.HideOrg("acme", true)
	_, err := c.Authorize(t.Context(), &oauth2.Token{AccessToken: alice.Token})
	want := "GitHub would not show alice's membership of the org acme (the org may restrict OAuth app access: an org owner can approve this app)"
	if !errors.Is(err, github.ErrDenied) || github.DeniedReason(err) != want {
		t.Errorf("Authorize in a hidden org = %v, want ErrDenied saying %q", err, want)
	}

	limited := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/user" {
			w.Write([]byte(`{"login":"alice","id":1}`))
			return
		}
		w.Header().Set("X-RateLimit-Remaining", "0")
		http.Error(w, `{"message":"API rate limit exceeded"}`, http.StatusForbidden)
	}))
	t.Cleanup(limited.Close)
	lc, err := github.New(github.Config{ClientID: "x", APIURL: limited.URL, Orgs: []string{"acme"}, HTTPClient: limited.Client()})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := lc.Authorize(t.Context(), &oauth2.Token{AccessToken: "t"}); err == nil || errors.Is(err, github.ErrDenied) || !strings.Contains(err.Error(), "rate limited") {
		t.Errorf("Authorize when rate limited = %v, want a transient error, not ErrDenied", err)
	}
	if err := lc.Check(t.Context(), &oauth2.Token{AccessToken: "t"}, "alice", "acme"); err == nil || errors.Is(err, github.ErrDenied) {
		t.Errorf("Check when rate limited = %v, want a transient error, not ErrDenied", err)
	}
}

// The periodic check says what changed: removed from the org, left the
// team, the org dropped from the configuration, the GitHub token revoked.
func TestCheckAfterRemoval(t *testing.T) {
	gh, alice, _ := newFake(t)
	c := client(t, gh, []string{"acme"}, []string{"acme/infra"})
	tok := &oauth2.Token{AccessToken: alice.Token}
	if err := c.Check(t.Context(), tok, "alice", "acme"); err != nil {
		t.Fatalf("Check of a member: %v", err)
	}
	check := func(what, org, want string) {
		t.Helper()
		err := c.Check(t.Context(), tok, "alice", org)
		if !errors.Is(err, github.ErrDenied) || github.DeniedReason(err) != want {
			t.Errorf("Check %s = %v, want ErrDenied saying %q", what, err, want)
		}
	}
	gh.SetTeam("acme/infra", "alice", "")
	check("after leaving the team", "acme", "alice is in the GitHub org acme but not in its team infra")
	gh.SetOrg("acme", "alice", "")
	check("after removal from the org", "acme", "alice is not a member of the GitHub org acme")
	check("of an org no longer allowed", "other", "the GitHub org other is no longer allowed on this coordinator")
	gh.SetOrg("acme", "alice", "active")
	gh.SetTeam("acme/infra", "alice", "active")
	gh.RevokeToken(alice)
	check("with a revoked GitHub token", "acme", "GitHub no longer accepts the user's token (revoked or expired)")
	if err := c.Check(t.Context(), tok, "alice", "acme"); !errors.Is(err, github.ErrTokenRefused) {
		t.Errorf("Check with a revoked GitHub token = %v, want ErrTokenRefused", err)
	}
}

// Refusal rebuilds a reason from a code and an org, from the
// configuration alone.
func TestRefusalFromConfig(t *testing.T) {
	gh, _, _ := newFake(t)
	c := client(t, gh, []string{"acme", "other"}, []string{"acme/infra"})
	tests := []struct {
		org  string
		why  github.Refused
		want string // "" for no refusal
	}{
		{"acme", github.NotMember, "this GitHub account is not a member of the GitHub org acme"},
		{"acme", github.InvitePending, "this GitHub account's invitation to the GitHub org acme is pending: accept it at " + gh.URL + "/orgs/acme/invitation, then sign in again"},
		{"acme", github.NotInTeam, "this GitHub account is in the GitHub org acme but not in its team infra"},
		{"other", github.NotInTeam, "this GitHub account is in the GitHub org other, but this coordinator admits none of its teams"},
		{"evil", github.NotMember, ""}, // not an allowed org
		{"acme", github.Refused("<b>hi</b>"), ""},
	}
	for _, tt := range tests {
		r, ok := c.Refusal(tt.org, tt.why)
		if got := map[bool]string{true: r.String()}[ok]; got != tt.want {
			t.Errorf("Refusal(%q, %q) = %q, want %q", tt.org, tt.why, got, tt.want)
		}
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
