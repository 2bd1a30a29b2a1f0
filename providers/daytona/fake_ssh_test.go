//go:build unix

package daytona_test

import (
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"go.uber.org/goleak"

	"github.com/crabbox-dev/crabbox/internal/testgateway"
)

// fakeToken is an SSH access token of the fake.
type fakeToken struct {
	sandboxID string
	expiresAt time.Time
	revoked   bool
}

// createSSHAccess mints a token (POST /sandbox/{ref}/ssh-access), valid
// for expiresInMinutes (default 60), answering Daytona's SshAccessDto
// with an sshCommand naming the fake's gateway.
func (f *fakeDaytona) createSSHAccess(w http.ResponseWriter, r *http.Request) {
	minutes := 60
	if v := r.URL.Query().Get("expiresInMinutes"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			apiErr(w, http.StatusBadRequest, "expiresInMinutes must be a positive number")
			return
		}
		minutes = n
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	s := f.lookup(r.PathValue("ref"))
	if s == nil {
		apiErr(w, http.StatusNotFound, "Sandbox not found")
		return
	}
	token := strings.ReplaceAll(uuid.NewString(), "-", "")
	now := time.Now().UTC()
	f.tokens[token] = &fakeToken{sandboxID: s.ID, expiresAt: now.Add(time.Duration(minutes) * time.Minute)}
	port := f.gateway.Port()
	if f.sshCommandPort != 0 {
		port = f.sshCommandPort
	}
	reply(w, http.StatusOK, map[string]any{
		"id": uuid.NewString(), "sandboxId": s.ID, "token": token,
		"expiresAt": f.tokens[token].expiresAt.Format(time.RFC3339Nano), "createdAt": now.Format(time.RFC3339Nano),
		"updatedAt": now.Format(time.RFC3339Nano), "sshCommand": "ssh -p " + strconv.Itoa(port) + " " + token + "@127.0.0.1",
	})
}

// revokeSSHAccess revokes the token of query "token", or every token of
// the sandbox without one.
func (f *fakeDaytona) revokeSSHAccess(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	s := f.lookup(r.PathValue("ref"))
	if s == nil {
		apiErr(w, http.StatusNotFound, "Sandbox not found")
		return
	}
	only := r.URL.Query().Get("token")
	for token, t := range f.tokens {
		if t.sandboxID == s.ID && (only == "" || only == token) {
			t.revoked = true
		}
	}
	reply(w, http.StatusOK, map[string]any{})
}

// sshLogin is the gateway's check of a token: unexpired, unrevoked, of a
// started sandbox. The sandbox's SSH server starts when first reached
// (after sshDown more refusals).
func (f *fakeDaytona) sshLogin(user string) (testgateway.Upstream, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	t := f.tokens[user]
	if t == nil || t.revoked || !time.Now().Before(t.expiresAt) {
		return testgateway.Upstream{}, false
	}
	s := f.sandboxes[t.sandboxID]
	if s == nil || s.State != "started" {
		return testgateway.Upstream{}, false
	}
	if f.sshDown > 0 {
		f.sshDown--
		up, err := testgateway.Unreachable()
		return up, err == nil
	}
	if s.box == nil {
		home := filepath.Join(s.dir, "home", "daytona")
		box, err := f.gateway.StartBox(home, []string{"HOME=" + home, "USER=daytona", "PATH=" + os.Getenv("PATH")})
		if err != nil {
			f.t.Errorf("start the SSH server of sandbox %s: %v", s.ID, err)
			return testgateway.Upstream{}, false
		}
		s.box = box
	}
	return s.box.Upstream(), true
}

// minted returns every token minted so far.
func (f *fakeDaytona) minted() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]string, 0, len(f.tokens))
	for token := range f.tokens {
		out = append(out, token)
	}
	return out
}

// expireTokens makes every token minted so far expired.
func (f *fakeDaytona) expireTokens() {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, t := range f.tokens {
		t.expiresAt = time.Now().Add(-time.Second)
	}
}

// gatewayGoroutines are the goleak options for the fake's SSH gateway and
// the sandboxes' SSH servers, which belong to the fake, not the backend.
func gatewayGoroutines() []goleak.Option {
	return []goleak.Option{
		goleak.IgnoreAnyFunction("github.com/crabbox-dev/crabbox/internal/testgateway.(*Gateway).accept"),
		goleak.IgnoreAnyFunction("github.com/crabbox-dev/crabbox/internal/testgateway.(*Gateway).StartBox.func1"),
	}
}
