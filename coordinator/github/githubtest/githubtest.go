// Package githubtest is a fake GitHub on loopback for tests of sign-in:
// the OAuth web flow (an authorize page that approves at once as a chosen
// user), the device flow, and the user and membership API.
package githubtest

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"

	"github.com/crabbox-dev/crabbox/coordinator/github"
)

// ClientID and ClientSecret are the OAuth app the fake knows.
const (
	ClientID     = "Iv1.fake-client"
	ClientSecret = "fake-client-secret-never-shown"
)

// User is a GitHub user of the fake, known by their access token.
type User struct {
	Login string
	ID    int64
	Token string
}

// Server is the fake GitHub. Its web pages are at URL, its API at APIURL.
type Server struct {
	URL, APIURL string

	srv *httptest.Server

	mu    sync.Mutex
	users map[string]User              // by token
	orgs  map[string]map[string]string // org -> login -> membership state
	teams map[string]map[string]string // org/team -> login -> state
	// hidden orgs answer 403 to membership requests.
	hidden map[string]bool
	// web flow: the user the authorize page signs in next, and the
	// codes it handed out with their PKCE challenge and token.
	approveAs string
	decline   bool
	codes     map[string]grant
	// DevicePolls are the answers the token endpoint gives to device
	// polls in turn (see DevicePolls).
	devicePolls []string
	n           int
	// interval is the device flow's polling interval in seconds.
	interval int
}

type grant struct {
	challenge, token, redirect string
}

// Start serves a fake GitHub on loopback until the test ends.
func Start(t testing.TB) *Server {
	s := &Server{
		users: map[string]User{}, orgs: map[string]map[string]string{},
		teams: map[string]map[string]string{}, hidden: map[string]bool{}, codes: map[string]grant{}, interval: 5,
	}
	s.srv = httptest.NewServer(http.HandlerFunc(s.serve))
	t.Cleanup(s.srv.Close)
	s.URL, s.APIURL = s.srv.URL, s.srv.URL+"/api/v3"
	return s
}

// Acme is a fake GitHub where alice is an active member of the org acme and
// bob only invited to it (a pending membership), and a client of its OAuth
// app that lets in acme's members: the usual cast of sign-in tests.
func Acme(t testing.TB) (s *Server, client *github.Client, alice, bob User) {
	s = Start(t)
	alice, bob = s.AddUser("alice", 1), s.AddUser("bob", 2)
	s.SetOrg("acme", "alice", "active")
	s.SetOrg("acme", "bob", "pending")
	client, err := github.New(github.Config{
		ClientID: ClientID, ClientSecret: ClientSecret,
		WebURL: s.URL, APIURL: s.APIURL, Orgs: []string{"acme"}, HTTPClient: s.Client(),
	})
	if err != nil {
		t.Fatal(err)
	}
	return s, client, alice, bob
}

// Client is an HTTP client for the fake.
func (s *Server) Client() *http.Client { return s.srv.Client() }

// AddUser adds a user with an access token.
func (s *Server) AddUser(login string, id int64) User {
	s.mu.Lock()
	defer s.mu.Unlock()
	u := User{Login: login, ID: id, Token: "gho_" + login}
	s.users[u.Token] = u
	return u
}

// RevokeToken makes GitHub refuse the user's token.
func (s *Server) RevokeToken(u User) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.users, u.Token)
}

// SetOrg sets login's membership state in org ("active", "pending"); ""
// removes it.
func (s *Server) SetOrg(org, login, state string) { s.set(s.orgs, org, login, state) }

// SetTeam sets login's membership state in team ("org/slug").
func (s *Server) SetTeam(team, login, state string) { s.set(s.teams, team, login, state) }

// Invite invites login to org and to its teams (slugs), as an org owner
// does on GitHub: the memberships are pending until Accept.
func (s *Server) Invite(org, login string, teams ...string) {
	s.SetOrg(org, login, "pending")
	for _, t := range teams {
		s.SetTeam(org+"/"+t, login, "pending")
	}
}

// Accept accepts login's invitation to org: the org membership and the
// pending team memberships in it become active.
func (s *Server) Accept(org, login string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.orgs[org][login] != "pending" {
		return
	}
	s.orgs[org][login] = "active"
	for team, members := range s.teams {
		if strings.HasPrefix(team, org+"/") && members[login] == "pending" {
			members[login] = "active"
		}
	}
}

// HideOrg makes GitHub refuse (403) to show memberships of org, as it does
// for an org that restricts OAuth app access; false shows them again.
func (s *Server) HideOrg(org string, hidden bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.hidden[org] = hidden
}

func (s *Server) set(m map[string]map[string]string, key, login, state string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if m[key] == nil {
		m[key] = map[string]string{}
	}
	if state == "" {
		delete(m[key], login)
		return
	}
	m[key][login] = state
}

// ApproveAs makes the authorize page sign in as u from now on.
func (s *Server) ApproveAs(u User) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.approveAs, s.decline = u.Token, false
}

// Decline makes the authorize page answer as GitHub does when the user
// cancels: back to the redirect URI with error=access_denied and the state.
func (s *Server) Decline() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.decline = true
}

// DeviceInterval sets the polling interval the device flow asks for
// (default 5 s, GitHub's).
func (s *Server) DeviceInterval(seconds int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.interval = seconds
}

// DevicePolls sets the answers to the next device polls, as GitHub gives
// them (HTTP 200 with an error code, except the http ones): "pending"
// (authorization_pending), "slow_down", "expired" (expired_token), "denied"
// (access_denied), "disabled" (device_flow_disabled), "unknown"
// (incorrect_device_code), "http404" or "http500" (a bare 404 or 500, an
// outage), or a user's token. A
// device code other than the one the fake issued, or a poll with no answer
// left, gets incorrect_device_code.
func (s *Server) DevicePolls(answers ...string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.devicePolls = answers
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	writeJSON := func(status int, v any) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		json.NewEncoder(w).Encode(v)
	}
	switch {
	case r.Method == http.MethodGet && r.URL.Path == "/login/oauth/authorize":
		q := r.URL.Query()
		if q.Get("client_id") != ClientID || q.Get("code_challenge_method") != "S256" || q.Get("redirect_uri") == "" || (s.approveAs == "" && !s.decline) {
			http.Error(w, "bad authorize request", http.StatusBadRequest)
			return
		}
		if s.decline {
			back, err := url.Parse(q.Get("redirect_uri"))
			if err != nil {
				http.Error(w, "bad redirect_uri", http.StatusBadRequest)
				return
			}
			back.RawQuery = url.Values{"error": {"access_denied"}, "error_description": {"The user has denied your application access."}, "state": {q.Get("state")}}.Encode()
			http.Redirect(w, r, back.String(), http.StatusFound)
			return
		}
		s.n++
		code := fmt.Sprintf("code-%d", s.n)
		s.codes[code] = grant{challenge: q.Get("code_challenge"), token: s.approveAs, redirect: q.Get("redirect_uri")}
		back, err := url.Parse(q.Get("redirect_uri"))
		if err != nil {
			http.Error(w, "bad redirect_uri", http.StatusBadRequest)
			return
		}
		bq := back.Query()
		bq.Set("code", code)
		bq.Set("state", q.Get("state"))
		back.RawQuery = bq.Encode()
		http.Redirect(w, r, back.String(), http.StatusFound)
	case r.Method == http.MethodPost && r.URL.Path == "/login/device/code":
		if r.FormValue("client_id") != ClientID || r.FormValue("scope") != "read:org" {
			writeJSON(400, map[string]string{"error": "bad_request"})
			return
		}
		writeJSON(200, map[string]any{"device_code": "dev-123", "user_code": "ABCD-1234",
			"verification_uri": s.URL + "/login/device", "expires_in": 900, "interval": s.interval})
	case r.Method == http.MethodPost && r.URL.Path == "/login/oauth/access_token":
		s.token(w, r, writeJSON)
	case r.Method == http.MethodGet && strings.HasPrefix(r.URL.Path, "/api/v3/"):
		s.api(w, r, writeJSON)
	default:
		writeJSON(404, map[string]string{"message": "Not Found"})
	}
}

func (s *Server) token(w http.ResponseWriter, r *http.Request, writeJSON func(int, any)) {
	if r.FormValue("client_id") != ClientID {
		writeJSON(400, map[string]string{"error": "incorrect_client_credentials"})
		return
	}
	switch r.FormValue("grant_type") {
	case "urn:ietf:params:oauth:grant-type:device_code":
		if r.FormValue("device_code") != "dev-123" || len(s.devicePolls) == 0 {
			writeJSON(200, map[string]string{"error": "incorrect_device_code", "error_description": "unknown code"})
			return
		}
		next := s.devicePolls[0]
		s.devicePolls = s.devicePolls[1:]
		switch next {
		case "pending":
			writeJSON(200, map[string]string{"error": "authorization_pending"})
		case "slow_down":
			writeJSON(200, map[string]any{"error": "slow_down", "interval": 10})
		case "expired":
			writeJSON(200, map[string]string{"error": "expired_token"})
		case "denied":
			writeJSON(200, map[string]string{"error": "access_denied"})
		case "disabled":
			writeJSON(200, map[string]string{"error": "device_flow_disabled", "error_description": "Device Flow must be explicitly enabled for this App"})
		case "unknown":
			writeJSON(200, map[string]string{"error": "incorrect_device_code", "error_description": "The device_code provided is not valid."})
		case "http404":
			writeJSON(404, map[string]string{"message": "Not Found"})
		case "http500":
			writeJSON(500, map[string]string{"message": "Server Error"})
		default:
			writeJSON(200, map[string]string{"access_token": next, "token_type": "bearer", "scope": "read:org"})
		}
	case "authorization_code":
		g, ok := s.codes[r.FormValue("code")]
		sum := sha256.Sum256([]byte(r.FormValue("code_verifier")))
		if !ok || r.FormValue("client_secret") != ClientSecret || r.FormValue("redirect_uri") != g.redirect ||
			base64.RawURLEncoding.EncodeToString(sum[:]) != g.challenge {
			writeJSON(200, map[string]string{"error": "bad_verification_code", "error_description": "The code passed is incorrect or expired."})
			return
		}
		delete(s.codes, r.FormValue("code"))
		writeJSON(200, map[string]string{"access_token": g.token, "token_type": "bearer", "scope": "read:org"})
	default:
		writeJSON(400, map[string]string{"error": "unsupported_grant_type"})
	}
}

func (s *Server) api(w http.ResponseWriter, r *http.Request, writeJSON func(int, any)) {
	tok, _ := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	u, ok := s.users[tok]
	if !ok {
		writeJSON(401, map[string]string{"message": "Bad credentials"})
		return
	}
	parts := strings.Split(strings.TrimPrefix(r.URL.Path, "/api/v3/"), "/")
	var state string
	switch {
	case len(parts) == 1 && parts[0] == "user":
		writeJSON(200, map[string]any{"login": u.Login, "id": u.ID})
		return
	case len(parts) == 4 && parts[0] == "user" && parts[1] == "memberships" && parts[2] == "orgs":
		// The authenticated user's membership: active or pending, 404
		// without one.
		if s.hidden[parts[3]] {
			writeJSON(403, map[string]string{"message": "organization has enabled OAuth App access restrictions"})
			return
		}
		state, ok = s.orgs[parts[3]][u.Login]
	case len(parts) == 6 && parts[0] == "orgs" && parts[2] == "teams" && parts[4] == "memberships":
		// A team membership: only a team the asker can see, that is an
		// active member of its org; active or pending, 404 without one.
		ok = false
		if s.orgs[parts[1]][u.Login] == "active" && !s.hidden[parts[1]] {
			state, ok = s.teams[parts[1]+"/"+parts[3]][parts[5]]
		}
	default:
		ok = false
	}
	if !ok {
		writeJSON(404, map[string]string{"message": "Not Found"})
		return
	}
	writeJSON(200, map[string]string{"state": state})
}
