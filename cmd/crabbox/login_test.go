package main

import (
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/crabbox-dev/crabbox/config"
	coordclient "github.com/crabbox-dev/crabbox/coordinator/client"
	"github.com/crabbox-dev/crabbox/coordinator/github/githubtest"
)

// githubCoordinator serves a coordinator whose GitHub sign-in is the
// fake's, where alice is an active member of acme.
func githubCoordinator(t *testing.T) (*served, *githubtest.Server, githubtest.User) {
	t.Helper()
	gh := githubtest.Start(t)
	gh.DeviceInterval(1)
	alice := gh.AddUser("alice", 1)
	gh.SetOrg("acme", "alice", "active")
	cfg := filepath.Join(t.TempDir(), "coordinator.json")
	body := fmt.Sprintf(`{"providers":{"local":{}},"github":{"clientID":%q,"orgs":["acme"],"webURL":%q,"apiURL":%q}}`, githubtest.ClientID, gh.URL, gh.APIURL)
	if err := os.WriteFile(cfg, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	s := startCoordinator(t, []string{"CRABBOX_SESSION_SECRET=" + testSecret, "CRABBOX_GITHUB_CLIENT_SECRET=" + githubtest.ClientSecret,
		"CRABBOX_TEST_MAIN=1", "GORACE=atexit_sleep_ms=0"}, "--config", cfg)
	return s, gh, alice
}

// savedToken is the token crabbox login saved in env's config directory.
func savedToken(t *testing.T, env []string) string {
	t.Helper()
	l, ok, err := config.ReadLogin(config.LoginFile(env))
	if err != nil || !ok {
		t.Fatalf("no saved sign-in: %v", err)
	}
	return l.Token
}

// whoamiStatus is the coordinator's answer to GET /v1/whoami with token:
// 200, or the error's status.
func whoamiStatus(t *testing.T, url, token string) int {
	t.Helper()
	cl, err := coordclient.New(url, token)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.CloseIdleConnections()
	_, err = cl.Whoami(t.Context())
	var e *coordclient.Error
	switch {
	case err == nil:
		return http.StatusOK
	case errors.As(err, &e):
		return e.Status
	}
	t.Fatalf("whoami: %v", err)
	return 0
}

// crabbox login polls through a GitHub outage (the coordinator's 502)
// and signs in; a device code GitHub does not know ends it with GitHub's
// reason.
func TestLoginRetriesAndRefusals(t *testing.T) {
	t.Parallel()
	s, gh, alice := githubCoordinator(t)

	env := stateEnv(t)
	gh.DevicePolls("http500", alice.Token)
	r := crabboxCmd(t, env, "", "login", s.url)
	if r.code != 0 || !strings.Contains(r.stderr, "trying again in") || !strings.HasPrefix(r.stdout, "Logged in to "+s.url+" as alice") {
		t.Fatalf("login through a 5xx: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}

	other := stateEnv(t)
	gh.DevicePolls("unknown")
	r = crabboxCmd(t, other, "", "login", s.url)
	if r.code != 125 || !strings.Contains(r.stderr, "incorrect_device_code") || strings.Contains(r.stderr, "did not answer") {
		t.Errorf("login with a code GitHub does not know: exit %d, stderr %q; want GitHub's reason", r.code, r.stderr)
	}
	if _, ok, _ := config.ReadLogin(config.LoginFile(other)); ok {
		t.Error("a refused login saved a sign-in")
	}
}

// crabbox logout revokes the saved token at the coordinator, then forgets
// it; --keep-token only forgets it; a coordinator that cannot be reached
// keeps the sign-in, so the revocation can be tried again.
func TestLogoutRevokes(t *testing.T) {
	t.Parallel()
	s, gh, alice := githubCoordinator(t)
	login := func(env []string) string {
		t.Helper()
		gh.DevicePolls(alice.Token)
		if r := crabboxCmd(t, env, "", "login", s.url); r.code != 0 {
			t.Fatalf("login: exit %d, stderr %q", r.code, r.stderr)
		}
		return savedToken(t, env)
	}

	env := stateEnv(t)
	token := login(env)
	r := crabboxCmd(t, env, "", "logout")
	if r.code != 0 || !strings.HasPrefix(r.stdout, "Logged out of "+s.url) || !strings.Contains(r.stdout, "revoked") {
		t.Errorf("logout: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	if got := whoamiStatus(t, s.url, token); got != http.StatusUnauthorized {
		t.Errorf("whoami with the token after logout: %d, want 401", got)
	}
	if r := crabboxCmd(t, env, "", "logout"); r.code != 0 || r.stdout != "Not logged in.\n" {
		t.Errorf("second logout: exit %d, stdout %q", r.code, r.stdout)
	}

	token = login(env)
	r = crabboxCmd(t, env, "", "logout", "--keep-token")
	if r.code != 0 || !strings.Contains(r.stdout, "stays valid") {
		t.Errorf("logout --keep-token: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	if got := whoamiStatus(t, s.url, token); got != http.StatusOK {
		t.Errorf("whoami with the kept token: %d, want 200", got)
	}
	if _, ok, _ := config.ReadLogin(config.LoginFile(env)); ok {
		t.Error("logout --keep-token left the sign-in saved")
	}

	token = login(env)
	s.stop(t)
	r = crabboxCmd(t, env, "", "logout")
	if r.code == 0 || !strings.Contains(r.stderr, "could not revoke the token") || !strings.Contains(r.stderr, "--keep-token") || strings.Contains(r.stderr, token) {
		t.Errorf("logout with the coordinator down: exit %d, stderr %q; want a failure that says so and how to only forget", r.code, r.stderr)
	}
	if got := savedToken(t, env); got != token {
		t.Error("logout that could not revoke removed the sign-in")
	}
	if r := crabboxCmd(t, env, "", "logout", "--keep-token"); r.code != 0 {
		t.Errorf("logout --keep-token with the coordinator down: exit %d, stderr %q", r.code, r.stderr)
	}
}
