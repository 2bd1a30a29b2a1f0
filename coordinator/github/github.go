// Package github signs coordinator users in with GitHub: the OAuth web flow
// (for the portal and the upstream CLI's browser sign-in), the device flow
// (for crabbox login), and the org and
// team membership checks that decide who may use the coordinator, at sign-in
// and again later (Check) so that a user removed from the org loses access.
//
// The GitHub web and API base URLs are configurable, for GitHub Enterprise
// Server and for tests against a fake. The client secret is a value the
// caller reads from the environment or a file; it never appears in errors.
package github

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"golang.org/x/oauth2"
)

// Defaults for github.com.
const (
	DefaultWebURL = "https://github.com"
	DefaultAPIURL = "https://api.github.com"
)

// Scope is the OAuth scope a sign-in asks for: read:org lets the
// coordinator read the user's org and team memberships (GET /user needs
// none).
const Scope = "read:org"

// Config says which GitHub OAuth app signs users in and who may.
type Config struct {
	// ClientID is the OAuth app's client ID.
	ClientID string
	// ClientSecret is the OAuth app's secret, needed by the web flow only
	// (the device flow works without it).
	ClientSecret string
	// WebURL is GitHub's web address (default DefaultWebURL; for GitHub
	// Enterprise Server, https://HOST).
	WebURL string
	// APIURL is GitHub's REST API address (default DefaultAPIURL; for
	// GitHub Enterprise Server, https://HOST/api/v3).
	APIURL string
	// Orgs are the organizations whose active members may sign in; a user
	// is placed in the first of them they belong to. At least one is
	// required: a coordinator never lets every GitHub user in.
	Orgs []string
	// Teams, when set, narrow that down to active members of one of these
	// teams, each "org/team-slug" (the org must be one of Orgs).
	Teams []string
	// HTTPClient makes the requests (default: a client with a 30 s
	// timeout).
	HTTPClient *http.Client
}

// Client talks to GitHub for one OAuth app. It keeps no per-user state.
type Client struct {
	cfg   Config
	oauth *oauth2.Config
	api   *url.URL
	web   *url.URL
	hc    *http.Client
}

// New checks cfg and returns a client.
func New(cfg Config) (*Client, error) {
	if cfg.ClientID == "" {
		return nil, errors.New("github: no OAuth client ID")
	}
	if len(cfg.Orgs) == 0 {
		return nil, errors.New("github: no allowed orgs: name at least one org whose members may sign in")
	}
	for _, o := range cfg.Orgs {
		if !validName(o) {
			return nil, fmt.Errorf("github: allowed org %q is not a GitHub org name", o)
		}
	}
	for _, t := range cfg.Teams {
		org, team, ok := strings.Cut(t, "/")
		if !ok || !validName(org) || !validName(team) {
			return nil, fmt.Errorf("github: allowed team %q: want org/team-slug", t)
		}
		if !slices.Contains(cfg.Orgs, org) {
			return nil, fmt.Errorf("github: allowed team %q: its org %s is not among the allowed orgs %v", t, org, cfg.Orgs)
		}
	}
	web, err := baseURL("web", cfg.WebURL, DefaultWebURL)
	if err != nil {
		return nil, err
	}
	api, err := baseURL("API", cfg.APIURL, DefaultAPIURL)
	if err != nil {
		return nil, err
	}
	hc := cfg.HTTPClient
	if hc == nil {
		hc = &http.Client{Timeout: 30 * time.Second}
	}
	w := web.String()
	return &Client{
		cfg: cfg,
		oauth: &oauth2.Config{
			ClientID:     cfg.ClientID,
			ClientSecret: cfg.ClientSecret,
			Scopes:       []string{Scope},
			Endpoint: oauth2.Endpoint{
				AuthURL:       w + "/login/oauth/authorize",
				TokenURL:      w + "/login/oauth/access_token",
				DeviceAuthURL: w + "/login/device/code",
				AuthStyle:     oauth2.AuthStyleInParams,
			},
		},
		api: api,
		web: web,
		hc:  hc,
	}, nil
}

// validName reports whether s can be a GitHub org, team slug or login.
func validName(s string) bool {
	if s == "" || len(s) > 100 || s[0] == '-' {
		return false
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '.') {
			return false
		}
	}
	return true
}

func baseURL(what, s, def string) (*url.URL, error) {
	if s == "" {
		s = def
	}
	u, err := url.Parse(strings.TrimRight(s, "/"))
	if err != nil || u.Host == "" || (u.Scheme != "https" && u.Scheme != "http") || u.RawQuery != "" || u.User != nil {
		return nil, fmt.Errorf("github: %s URL %q: want https://host[/path]", what, s)
	}
	return u, nil
}

// context returns ctx carrying the client's HTTP client for x/oauth2.
func (c *Client) context(ctx context.Context) context.Context {
	return context.WithValue(ctx, oauth2.HTTPClient, c.hc)
}

// AuthCodeURL is the GitHub page a browser is sent to in the web flow.
// state must be unguessable and bound to the browser (a cookie), verifier
// a PKCE verifier (oauth2.GenerateVerifier) kept with it.
func (c *Client) AuthCodeURL(state, redirectURL, verifier string) string {
	return c.oauth.AuthCodeURL(state, oauth2.SetAuthURLParam("redirect_uri", redirectURL), oauth2.S256ChallengeOption(verifier))
}

// Exchange trades the web flow's code for the user's GitHub token.
func (c *Client) Exchange(ctx context.Context, code, redirectURL, verifier string) (*oauth2.Token, error) {
	tok, err := c.oauth.Exchange(c.context(ctx), code, oauth2.SetAuthURLParam("redirect_uri", redirectURL), oauth2.VerifierOption(verifier))
	if err != nil {
		return nil, fmt.Errorf("github: exchange the sign-in code: %w", scrub(err))
	}
	return tok, nil
}

// Device is a device-flow sign-in in progress: the user enters UserCode at
// VerificationURI; the device code stays with whoever polls.
type Device struct {
	DeviceCode      string    `json:"deviceCode"`
	UserCode        string    `json:"userCode"`
	VerificationURI string    `json:"verificationURI"`
	ExpiresAt       time.Time `json:"expiresAt"`
	// Interval is how long to wait between polls.
	Interval time.Duration `json:"-"`
}

// StartDevice starts a device-flow sign-in.
func (c *Client) StartDevice(ctx context.Context) (Device, error) {
	da, err := c.oauth.DeviceAuth(c.context(ctx))
	if err != nil {
		return Device{}, fmt.Errorf("github: start device sign-in: %w", scrub(err))
	}
	if da.DeviceCode == "" || da.UserCode == "" || da.VerificationURI == "" {
		return Device{}, errors.New("github: start device sign-in: the answer lacks the device code, user code or verification URI")
	}
	interval := time.Duration(da.Interval) * time.Second
	if interval <= 0 {
		interval = 5 * time.Second // RFC 8628's default
	}
	return Device{DeviceCode: da.DeviceCode, UserCode: da.UserCode, VerificationURI: da.VerificationURI, ExpiresAt: da.Expiry, Interval: interval}, nil
}

// Errors of a device-flow poll.
var (
	// ErrPending: the user has not finished yet; poll again after the
	// interval.
	ErrPending = errors.New("github: sign-in not finished yet")
	// ErrSlowDown: poll again, but wait 5 s longer from now on.
	ErrSlowDown = errors.New("github: polling too fast; wait longer between polls")
	// ErrDeviceExpired: the device code expired; start again.
	ErrDeviceExpired = errors.New("github: the sign-in code expired; start again")
	// ErrAccessDenied: the user declined.
	ErrAccessDenied = errors.New("github: the sign-in was declined")
	// ErrAppRefused: GitHub refused the coordinator's OAuth app itself
	// (incorrect_client_credentials, device_flow_disabled, ...): only the
	// coordinator's admin can fix that.
	ErrAppRefused = errors.New("github: GitHub refused the coordinator's OAuth app")
)

// RejectedError is GitHub refusing a device poll because of the device
// code the client sent (GitHub's error incorrect_device_code, or a 4xx
// answer without a known error): a client error, not an outage.
type RejectedError struct {
	// Code is GitHub's error code, or "http_NNN" for a bare 4xx answer.
	Code string
	// Description is GitHub's error_description (may be empty).
	Description string
}

func (e *RejectedError) Error() string {
	if e.Description == "" {
		return "github: poll device sign-in: refused: " + e.Code
	}
	return "github: poll device sign-in: refused: " + e.Code + ": " + e.Description
}

// Reason says in words why GitHub refused, fit to show a user.
func (e *RejectedError) Reason() string {
	switch e.Code {
	case "incorrect_device_code":
		return "GitHub does not know this device code (incorrect_device_code); start the sign-in again"
	}
	if e.Description != "" {
		return fmt.Sprintf("GitHub refused the device code (%s: %s)", e.Code, e.Description)
	}
	return fmt.Sprintf("GitHub refused the device code (%s)", e.Code)
}

// PollDevice asks GitHub once whether the device-flow sign-in of
// deviceCode is done: the user's token when it is, else ErrPending,
// ErrSlowDown, ErrDeviceExpired, ErrAccessDenied, a *RejectedError (the
// code is not one GitHub knows) or another error (GitHub did not answer, or
// refused the OAuth app itself, as with device_flow_disabled). (x/oauth2
// polls in a loop with a real ticker; a coordinator answers each of the
// CLI's polls with one request instead.)
func (c *Client) PollDevice(ctx context.Context, deviceCode string) (*oauth2.Token, error) {
	form := url.Values{
		"client_id":   {c.cfg.ClientID},
		"device_code": {deviceCode},
		"grant_type":  {"urn:ietf:params:oauth:grant-type:device_code"},
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.oauth.Endpoint.TokenURL, strings.NewReader(form.Encode()))
	if err != nil {
		return nil, fmt.Errorf("github: poll device sign-in: %w", err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Accept", "application/json")
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("github: poll device sign-in: %w", scrub(err))
	}
	defer resp.Body.Close()
	var body struct {
		AccessToken string `json:"access_token"`
		TokenType   string `json:"token_type"`
		Scope       string `json:"scope"`
		Error       string `json:"error"`
		Description string `json:"error_description"`
	}
	decodeErr := json.NewDecoder(io.LimitReader(resp.Body, 64<<10)).Decode(&body)
	clientError := resp.StatusCode >= 400 && resp.StatusCode < 500 && resp.StatusCode != http.StatusTooManyRequests
	if decodeErr != nil {
		if clientError {
			return nil, &RejectedError{Code: fmt.Sprintf("http_%d", resp.StatusCode)}
		}
		return nil, fmt.Errorf("github: poll device sign-in: HTTP %d, unreadable answer: %w", resp.StatusCode, decodeErr)
	}
	switch body.Error {
	case "":
	case "authorization_pending":
		return nil, ErrPending
	case "slow_down":
		return nil, ErrSlowDown
	case "expired_token":
		return nil, ErrDeviceExpired
	case "access_denied":
		return nil, ErrAccessDenied
	case "incorrect_device_code":
		return nil, &RejectedError{Code: body.Error, Description: clipText(body.Description)}
	case "incorrect_client_credentials", "device_flow_disabled", "unsupported_grant_type":
		// The coordinator's OAuth app is at fault, not the client.
		return nil, fmt.Errorf("%w: %s: %s", ErrAppRefused, body.Error, clipText(body.Description))
	default:
		if clientError {
			return nil, &RejectedError{Code: clipText(body.Error), Description: clipText(body.Description)}
		}
		return nil, fmt.Errorf("github: poll device sign-in: %s: %s", clipText(body.Error), clipText(body.Description))
	}
	if clientError {
		return nil, &RejectedError{Code: fmt.Sprintf("http_%d", resp.StatusCode)}
	}
	if resp.StatusCode != http.StatusOK || body.AccessToken == "" {
		return nil, fmt.Errorf("github: poll device sign-in: HTTP %d without a token", resp.StatusCode)
	}
	return &oauth2.Token{AccessToken: body.AccessToken, TokenType: body.TokenType}, nil
}

// User is a GitHub user allowed to use the coordinator.
type User struct {
	Login string `json:"login"`
	ID    int64  `json:"id"`
	// Org is the first allowed org the user is an active member of: the
	// org of the coordinator token issued to them.
	Org string `json:"org"`
}

// ErrDenied marks a user who is not (or no longer) allowed: not an active
// member of an allowed org, or of an allowed team, or a GitHub token GitHub
// no longer accepts. A *DeniedError says what GitHub answered.
var ErrDenied = errors.New("github: not allowed")

// ErrTokenRefused is the ErrDenied of a GitHub token GitHub no longer
// accepts (401): the user revoked it, or it expired.
var ErrTokenRefused = fmt.Errorf("%w: GitHub no longer accepts the user's token (revoked or expired)", ErrDenied)

// Refused is what GitHub answered about a user in an allowed org that does
// not let them in.
type Refused string

const (
	// NotMember: GitHub knows no membership of the user in the org (404).
	NotMember Refused = "not_member"
	// InvitePending: the user was invited to the org and has not accepted
	// yet (membership state "pending").
	InvitePending Refused = "invite_pending"
	// NotInTeam: the user is an active member of the org but not an
	// active member of any of its allowed teams.
	NotInTeam Refused = "not_in_team"
	// OrgHidden: GitHub refused to show the membership (403), as it does
	// for an org that restricts OAuth app access until an owner approves
	// the app.
	OrgHidden Refused = "org_hidden"
)

// Refusal is GitHub's answer about a user in one allowed org, when that
// answer does not let them in.
type Refusal struct {
	// Login is the GitHub user; empty when not known (the text then says
	// "this GitHub account").
	Login string
	// Org is the allowed org asked about.
	Org string
	// Why is what GitHub answered.
	Why Refused
	// Teams are Org's allowed teams ("org/team-slug"), for NotInTeam;
	// none when teams are configured for other orgs only.
	Teams []string
	// InviteURL is where the user accepts a pending invitation.
	InviteURL string
}

// String says what GitHub answered, fit to show the user.
func (r Refusal) String() string {
	who, whose := r.Login, r.Login+"'s"
	if r.Login == "" {
		who, whose = "this GitHub account", "this GitHub account's"
	}
	switch r.Why {
	case InvitePending:
		return fmt.Sprintf("%s invitation to the GitHub org %s is pending: accept it at %s, then sign in again", whose, r.Org, r.InviteURL)
	case NotInTeam:
		slugs := make([]string, len(r.Teams))
		for i, t := range r.Teams {
			_, slugs[i], _ = strings.Cut(t, "/")
		}
		switch len(slugs) {
		case 0:
			return fmt.Sprintf("%s is in the GitHub org %s, but this coordinator admits none of its teams", who, r.Org)
		case 1:
			return fmt.Sprintf("%s is in the GitHub org %s but not in its team %s", who, r.Org, slugs[0])
		}
		return fmt.Sprintf("%s is in the GitHub org %s but in none of its teams %s", who, r.Org, strings.Join(slugs, ", "))
	case OrgHidden:
		return fmt.Sprintf("GitHub would not show %s membership of the org %s (the org may restrict OAuth app access: an org owner can approve this app)", whose, r.Org)
	default:
		return fmt.Sprintf("%s is not a member of the GitHub org %s", who, r.Org)
	}
}

// DeniedError is the ErrDenied of a user GitHub does not let in: what it
// answered for each allowed org asked about, in the configured order.
type DeniedError struct {
	Refusals []Refusal
}

func (e *DeniedError) Error() string { return ErrDenied.Error() + ": " + e.reason() }

// Is makes a DeniedError an ErrDenied.
func (e *DeniedError) Is(target error) bool { return target == ErrDenied }

func (e *DeniedError) reason() string {
	parts := make([]string, len(e.Refusals))
	for i, r := range e.Refusals {
		parts[i] = r.String()
	}
	return strings.Join(parts, "; ")
}

// DeniedReason is what an ErrDenied error says after its prefix (why the
// user is not allowed, as GitHub answered), fit to show them.
func DeniedReason(err error) string {
	if de, ok := errors.AsType[*DeniedError](err); ok {
		return de.reason()
	}
	msg := err.Error()
	if rest, ok := strings.CutPrefix(msg, ErrDenied.Error()+": "); ok {
		return rest
	}
	return msg
}

// Refusal is the refusal why for org, in this client's configuration:
// false when org is not an allowed org, or why is not a Refused (or is
// NotInTeam without allowed teams). It lets a caller rebuild a
// reason from a code without trusting anything but the code.
func (c *Client) Refusal(org string, why Refused) (Refusal, bool) {
	if !slices.Contains(c.cfg.Orgs, org) {
		return Refusal{}, false
	}
	r := Refusal{Org: org, Why: why}
	switch why {
	case NotMember, OrgHidden:
	case InvitePending:
		r.InviteURL = c.inviteURL(org)
	case NotInTeam:
		if len(c.cfg.Teams) == 0 {
			return Refusal{}, false
		}
		r.Teams = c.teamsOf(org)
	default:
		return Refusal{}, false
	}
	return r, true
}

// inviteURL is the GitHub page where a user accepts an invitation to org.
func (c *Client) inviteURL(org string) string {
	u := *c.web
	u.Path = strings.TrimRight(u.Path, "/") + "/orgs/" + org + "/invitation"
	return u.String()
}

// teamsOf are the allowed teams of org.
func (c *Client) teamsOf(org string) []string {
	var teams []string
	for _, t := range c.cfg.Teams {
		if tOrg, _, _ := strings.Cut(t, "/"); tOrg == org {
			teams = append(teams, t)
		}
	}
	return teams
}

// Authorize looks up the user a GitHub token belongs to and checks that
// they may use the coordinator. A user who may not gets a *DeniedError
// (an ErrDenied) that says what GitHub answered for each allowed org.
func (c *Client) Authorize(ctx context.Context, tok *oauth2.Token) (User, error) {
	var u struct {
		Login string `json:"login"`
		ID    int64  `json:"id"`
	}
	if ok, err := c.get(ctx, tok, "/user", &u); err != nil {
		return User{}, err
	} else if !ok || !validName(u.Login) {
		return User{}, errors.New("github: the token does not belong to a user")
	}
	denied := &DeniedError{}
	for _, org := range c.cfg.Orgs {
		refusal, err := c.inOrg(ctx, tok, u.Login, org)
		if err != nil {
			return User{}, err
		}
		if refusal == nil {
			return User{Login: u.Login, ID: u.ID, Org: org}, nil
		}
		denied.Refusals = append(denied.Refusals, *refusal)
	}
	return User{}, denied
}

// Check re-checks that the user with login may still use the coordinator,
// in org: the periodic check of a signed-in user. It fails with a
// *DeniedError when they were removed from org or from every allowed team
// of it, and with another ErrDenied when org is no longer allowed or
// GitHub no longer accepts the token.
func (c *Client) Check(ctx context.Context, tok *oauth2.Token, login, org string) error {
	if !slices.Contains(c.cfg.Orgs, org) {
		return fmt.Errorf("%w: the GitHub org %s is no longer allowed on this coordinator", ErrDenied, org)
	}
	refusal, err := c.inOrg(ctx, tok, login, org)
	switch {
	case err != nil:
		return err
	case refusal != nil:
		return &DeniedError{Refusals: []Refusal{*refusal}}
	}
	return nil
}

// inOrg asks GitHub whether login (the token's user) is an active member
// of org, and of one of its allowed teams when teams are configured: nil
// when they are, else what GitHub answered.
func (c *Client) inOrg(ctx context.Context, tok *oauth2.Token, login, org string) (*Refusal, error) {
	// The authenticated user's own membership: GitHub shows it active or
	// pending (an invitation not yet accepted), and answers 404 for a
	// user with no membership.
	state, status, err := c.membership(ctx, tok, "/user/memberships/orgs/"+url.PathEscape(org))
	if err != nil {
		return nil, err
	}
	refusal := &Refusal{Login: login, Org: org}
	switch {
	case status == http.StatusForbidden:
		refusal.Why = OrgHidden
		return refusal, nil
	case status == http.StatusNotFound:
		refusal.Why = NotMember
		return refusal, nil
	case state == "pending":
		refusal.Why, refusal.InviteURL = InvitePending, c.inviteURL(org)
		return refusal, nil
	case state != "active":
		return nil, fmt.Errorf("github: membership of org %s: unknown state %q", org, state)
	}
	if len(c.cfg.Teams) == 0 {
		return nil, nil
	}
	teams := c.teamsOf(org)
	for _, t := range teams {
		_, slug, _ := strings.Cut(t, "/")
		// GitHub answers active or pending for a member of the team and
		// 404 (or 403 for a team the user may not see) otherwise.
		state, _, err := c.membership(ctx, tok, "/orgs/"+url.PathEscape(org)+"/teams/"+url.PathEscape(slug)+"/memberships/"+url.PathEscape(login))
		if err != nil {
			return nil, err
		}
		if state == "active" {
			return nil, nil
		}
	}
	refusal.Why, refusal.Teams = NotInTeam, teams
	return refusal, nil
}

// membership GETs a membership at path: its state, or the status 404 or
// 403 with an empty state.
func (c *Client) membership(ctx context.Context, tok *oauth2.Token, path string) (state string, status int, err error) {
	var m struct {
		State string `json:"state"`
	}
	status, err = c.do(ctx, tok, path, &m)
	return m.State, status, err
}

// get GETs an API path with the user's token into out; ok is false on 404
// or 403 (GitHub's answer for a membership it will not show).
func (c *Client) get(ctx context.Context, tok *oauth2.Token, path string, out any) (ok bool, err error) {
	status, err := c.do(ctx, tok, path, out)
	return status == http.StatusOK, err
}

// do GETs an API path with the user's token into out. It returns the
// status, 200, 404 or 403; a token GitHub refuses is ErrTokenRefused, any
// other answer an error.
func (c *Client) do(ctx context.Context, tok *oauth2.Token, path string, out any) (status int, err error) {
	u := *c.api
	u.Path = strings.TrimRight(u.Path, "/") + path
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return 0, fmt.Errorf("github: GET %s: %w", path, err)
	}
	req.Header.Set("Accept", "application/vnd.github+json")
	req.Header.Set("X-GitHub-Api-Version", "2022-11-28")
	tok.SetAuthHeader(req)
	resp, err := c.hc.Do(req)
	if err != nil {
		return 0, fmt.Errorf("github: GET %s: %w", path, scrub(err))
	}
	defer resp.Body.Close()
	switch {
	case rateLimited(resp):
		return 0, fmt.Errorf("github: GET %s: rate limited (HTTP %d)", path, resp.StatusCode)
	case resp.StatusCode == http.StatusNotFound || resp.StatusCode == http.StatusForbidden:
		return resp.StatusCode, nil
	case resp.StatusCode == http.StatusUnauthorized:
		return 0, ErrTokenRefused
	case resp.StatusCode != http.StatusOK:
		return 0, fmt.Errorf("github: GET %s: HTTP %d", path, resp.StatusCode)
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(out); err != nil {
		return 0, fmt.Errorf("github: GET %s: unreadable answer: %w", path, err)
	}
	return http.StatusOK, nil
}

// rateLimited reports whether GitHub's answer is a rate limit (403 or 429
// with no requests left or a Retry-After), not an answer about the user.
func rateLimited(resp *http.Response) bool {
	if resp.StatusCode != http.StatusForbidden && resp.StatusCode != http.StatusTooManyRequests {
		return false
	}
	return resp.StatusCode == http.StatusTooManyRequests || resp.Header.Get("X-RateLimit-Remaining") == "0" || resp.Header.Get("Retry-After") != ""
}

// clipText bounds a text GitHub sent before it goes into an error.
func clipText(s string) string {
	const n = 200
	if len(s) <= n {
		return s
	}
	return strings.ToValidUTF8(s[:n], "") + "..."
}

// scrub drops the request URL from a transport error, which x/oauth2 and
// net/http include, so that no query parameter reaches a log.
func scrub(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return fmt.Errorf("%s %s: %w", ue.Op, redactURL(ue.URL), ue.Err)
	}
	var re *oauth2.RetrieveError
	if errors.As(err, &re) {
		if re.ErrorCode != "" {
			return fmt.Errorf("%s: %s", re.ErrorCode, re.ErrorDescription)
		}
		if re.Response != nil {
			return fmt.Errorf("HTTP %d", re.Response.StatusCode)
		}
		return errors.New("GitHub refused the request")
	}
	return err
}

func redactURL(s string) string {
	u, err := url.Parse(s)
	if err != nil {
		return "(a GitHub URL)"
	}
	u.RawQuery = ""
	return u.String()
}
