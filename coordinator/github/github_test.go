package github_test

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"
	"golang.org/x/oauth2"

	"github.com/crabbox-dev/crabbox/coordinator/github"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const (
	clientID     = "Iv1.test-client"
	clientSecret = "test-client-secret-never-shown"
)

// fakeGitHub serves the OAuth web and device endpoints and the membership
// API for a few users, each known by their access token.
type fakeGitHub struct {
	mu sync.Mutex
	// users by access token: login and ID; a token absent is revoked.
	users map[string]struct {
		login string
		id    int64
	}
	orgs  map[string]map[string]string // org -> login -> membership state
	teams map[string]map[string]string // org/team -> login -> state
	// device flow: the answers the token endpoint gives in turn.
	devicePolls []string // "pending", "slow_down", "expired", "denied" or a token
	// web flow: the code's PKCE challenge and the token it yields.
	challenge, codeToken string
	requests             []string
}

func newFake(t *testing.T) (*fakeGitHub, *httptest.Server) {
	f := &fakeGitHub{
		users: map[string]struct {
			login string
			id    int64
		}{"tok-alice": {"alice", 1}, "tok-bob": {"bob", 2}},
		orgs: map[string]map[string]string{
			"acme":  {"alice": "active", "bob": "pending"},
			"other": {"bob": "active"},
		},
		teams: map[string]map[string]string{"acme/infra": {"alice": "active"}},
	}
	srv := httptest.NewServer(http.HandlerFunc(f.serve))
	t.Cleanup(srv.Close)
	return f, srv
}

func (f *fakeGitHub) serve(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.requests = append(f.requests, r.Method+" "+r.URL.Path)
	writeJSON := func(status int, v any) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		json.NewEncoder(w).Encode(v)
	}
	switch {
	case r.Method == http.MethodPost && r.URL.Path == "/login/device/code":
		if r.FormValue("client_id") != clientID || r.FormValue("scope") != "read:org" {
			writeJSON(400, map[string]string{"error": "bad_request"})
			return
		}
		writeJSON(200, map[string]any{"device_code": "dev-123", "user_code": "ABCD-1234",
			"verification_uri": "https://github.example/login/device", "expires_in": 900, "interval": 5})
	case r.Method == http.MethodPost && r.URL.Path == "/login/oauth/access_token":
		if r.FormValue("client_id") != clientID {
			writeJSON(400, map[string]string{"error": "incorrect_client_credentials"})
			return
		}
		switch r.FormValue("grant_type") {
		case "urn:ietf:params:oauth:grant-type:device_code":
			if r.FormValue("device_code") != "dev-123" || len(f.devicePolls) == 0 {
				writeJSON(200, map[string]string{"error": "incorrect_device_code", "error_description": "unknown code"})
				return
			}
			next := f.devicePolls[0]
			f.devicePolls = f.devicePolls[1:]
			switch next {
			case "pending":
				writeJSON(200, map[string]string{"error": "authorization_pending"})
			case "slow_down":
				writeJSON(200, map[string]any{"error": "slow_down", "interval": 10})
			case "expired":
				writeJSON(200, map[string]string{"error": "expired_token"})
			case "denied":
				writeJSON(200, map[string]string{"error": "access_denied"})
			default:
				writeJSON(200, map[string]string{"access_token": next, "token_type": "bearer", "scope": "read:org"})
			}
		case "authorization_code":
			sum := sha256.Sum256([]byte(r.FormValue("code_verifier")))
			if r.FormValue("client_secret") != clientSecret || r.FormValue("code") != "code-1" ||
				base64.RawURLEncoding.EncodeToString(sum[:]) != f.challenge {
				writeJSON(200, map[string]string{"error": "bad_verification_code", "error_description": "The code passed is incorrect or expired."})
				return
			}
			writeJSON(200, map[string]string{"access_token": f.codeToken, "token_type": "bearer", "scope": "read:org"})
		default:
			writeJSON(400, map[string]string{"error": "unsupported_grant_type"})
		}
	case r.Method == http.MethodGet:
		tok, _ := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		u, ok := f.users[tok]
		if !ok {
			writeJSON(401, map[string]string{"message": "Bad credentials"})
			return
		}
		parts := strings.Split(strings.Trim(r.URL.Path, "/"), "/")
		switch {
		case r.URL.Path == "/api/v3/user":
			writeJSON(200, map[string]any{"login": u.login, "id": u.id})
		case len(parts) == 6 && parts[2] == "user" && parts[3] == "memberships" && parts[4] == "orgs":
			state, ok := f.orgs[parts[5]][u.login]
			if !ok {
				writeJSON(404, map[string]string{"message": "Not Found"})
				return
			}
			writeJSON(200, map[string]string{"state": state})
		case len(parts) == 8 && parts[2] == "orgs" && parts[4] == "teams" && parts[6] == "memberships":
			state, ok := f.teams[parts[3]+"/"+parts[5]][parts[7]]
			if !ok {
				writeJSON(404, map[string]string{"message": "Not Found"})
				return
			}
			writeJSON(200, map[string]string{"state": state})
		default:
			writeJSON(404, map[string]string{"message": "Not Found"})
		}
	default:
		writeJSON(404, map[string]string{"message": "Not Found"})
	}
}

func client(t *testing.T, srv *httptest.Server, orgs, teams []string) *github.Client {
	t.Helper()
	c, err := github.New(github.Config{
		ClientID: clientID, ClientSecret: clientSecret,
		WebURL: srv.URL, APIURL: srv.URL + "/api/v3",
		Orgs: orgs, Teams: teams, HTTPClient: srv.Client(),
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
	_, srv := newFake(t)
	tests := []struct {
		name        string
		orgs, teams []string
		token       string
		want        github.User
		denied      string
	}{
		{"member", []string{"acme"}, nil, "tok-alice", github.User{Login: "alice", ID: 1, Org: "acme"}, ""},
		{"first org they are in", []string{"acme", "other"}, nil, "tok-bob", github.User{Login: "bob", ID: 2, Org: "other"}, ""},
		{"invitation pending", []string{"acme"}, nil, "tok-bob", github.User{}, "not an active member of any of the orgs acme"},
		{"in the team", []string{"acme"}, []string{"acme/infra"}, "tok-alice", github.User{Login: "alice", ID: 1, Org: "acme"}, ""},
		{"not in the team", []string{"acme", "other"}, []string{"acme/infra"}, "tok-bob", github.User{}, "not an active member of any of the teams acme/infra"},
		{"revoked token", []string{"acme"}, nil, "tok-revoked", github.User{}, "no longer accepts the user's token"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := client(t, srv, tt.orgs, tt.teams)
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
	f, srv := newFake(t)
	c := client(t, srv, []string{"acme"}, nil)
	tok := &oauth2.Token{AccessToken: "tok-alice"}
	if err := c.Check(t.Context(), tok, "alice", "acme"); err != nil {
		t.Fatalf("Check of a member: %v", err)
	}
	f.mu.Lock()
	delete(f.orgs["acme"], "alice")
	f.mu.Unlock()
	if err := c.Check(t.Context(), tok, "alice", "acme"); !errors.Is(err, github.ErrDenied) {
		t.Errorf("Check after removal = %v, want ErrDenied", err)
	}
	f.mu.Lock()
	f.orgs["acme"]["alice"] = "active"
	delete(f.users, "tok-alice")
	f.mu.Unlock()
	if err := c.Check(t.Context(), tok, "alice", "acme"); !errors.Is(err, github.ErrDenied) {
		t.Errorf("Check with a revoked GitHub token = %v, want ErrDenied", err)
	}
}

// The device flow: one poll per call, each answer mapped to its error.
func TestDeviceFlow(t *testing.T) {
	f, srv := newFake(t)
	c := client(t, srv, []string{"acme"}, nil)
	d, err := c.StartDevice(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if d.DeviceCode != "dev-123" || d.UserCode != "ABCD-1234" || d.VerificationURI != "https://github.example/login/device" || d.Interval.Seconds() != 5 || d.ExpiresAt.IsZero() {
		t.Fatalf("StartDevice = %+v", d)
	}
	f.mu.Lock()
	f.devicePolls = []string{"pending", "slow_down", "tok-alice", "expired", "denied"}
	f.mu.Unlock()
	for _, want := range []error{github.ErrPending, github.ErrSlowDown} {
		if _, err := c.PollDevice(t.Context(), d.DeviceCode); !errors.Is(err, want) {
			t.Fatalf("PollDevice = %v, want %v", err, want)
		}
	}
	tok, err := c.PollDevice(t.Context(), d.DeviceCode)
	if err != nil || tok.AccessToken != "tok-alice" {
		t.Fatalf("PollDevice once signed in = %+v, %v", tok, err)
	}
	for _, want := range []error{github.ErrDeviceExpired, github.ErrAccessDenied} {
		if _, err := c.PollDevice(t.Context(), d.DeviceCode); !errors.Is(err, want) {
			t.Errorf("PollDevice = %v, want %v", err, want)
		}
	}
	if _, err := c.PollDevice(t.Context(), "dev-unknown"); err == nil || !strings.Contains(err.Error(), "incorrect_device_code") {
		t.Errorf("PollDevice of an unknown code = %v, want GitHub's error", err)
	}
}

// The web flow sends the browser to GitHub with a PKCE challenge and trades
// the code, with its verifier, for the user's token.
func TestWebFlow(t *testing.T) {
	f, srv := newFake(t)
	c := client(t, srv, []string{"acme"}, nil)
	verifier := oauth2.GenerateVerifier()
	const redirect = "https://crabbox.example/portal/auth/callback"
	raw := c.AuthCodeURL("state-xyz", redirect, verifier)
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	if u.Path != "/login/oauth/authorize" || q.Get("client_id") != clientID || q.Get("state") != "state-xyz" ||
		q.Get("redirect_uri") != redirect || q.Get("scope") != "read:org" || q.Get("code_challenge_method") != "S256" {
		t.Fatalf("AuthCodeURL = %s", raw)
	}
	if strings.Contains(raw, clientSecret) {
		t.Fatalf("AuthCodeURL shows the client secret: %s", raw)
	}
	f.mu.Lock()
	f.challenge, f.codeToken = q.Get("code_challenge"), "tok-alice"
	f.mu.Unlock()

	if _, err := c.Exchange(t.Context(), "code-1", redirect, oauth2.GenerateVerifier()); err == nil || strings.Contains(err.Error(), clientSecret) {
		t.Errorf("Exchange with the wrong verifier = %v, want an error without the secret", err)
	}
	tok, err := c.Exchange(t.Context(), "code-1", redirect, verifier)
	if err != nil {
		t.Fatal(err)
	}
	user, err := c.Authorize(t.Context(), tok)
	if err != nil || user.Login != "alice" || user.Org != "acme" {
		t.Errorf("Authorize after the web flow = %+v, %v", user, err)
	}
}
