package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/crabbox-dev/crabbox"
	"github.com/crabbox-dev/crabbox/coordinator/api"
	coordclient "github.com/crabbox-dev/crabbox/coordinator/client"
	"github.com/crabbox-dev/crabbox/coordinator/github/githubtest"
)

var testSecret = strings.Repeat("k", 40)

// TestCoordinatorServeAndBrokeredRun starts `crabbox coordinator serve`
// (crabbox-coordinator, found on PATH) with the local provider and SQLite,
// runs `crabbox run` through it with a token from `crabbox-coordinator
// token issue`, and stops the server with SIGTERM.
func TestCoordinatorServeAndBrokeredRun(t *testing.T) {
	t.Parallel()
	const adminToken = "admin-token-for-the-test-0123456789"
	server := startCoordinator(t, []string{"CRABBOX_SESSION_SECRET=" + testSecret, "CRABBOX_ADMIN_TOKEN=" + adminToken, "CRABBOX_TEST_MAIN=1", "GORACE=atexit_sleep_ms=0"})
	url := server.url

	tok := coordinatorCmd(t, []string{"CRABBOX_SESSION_SECRET=" + testSecret}, "", "token", "issue", "--owner", "alice", "--org", "team")
	if tok.code != 0 {
		t.Fatalf("token issue: exit %d, stderr %q", tok.code, tok.stderr)
	}
	token := strings.TrimSpace(tok.stdout)
	directEnv := stateEnv(t)
	clientEnv := append(slices.Clone(directEnv), "CRABBOX_COORDINATOR="+url, "CRABBOX_COORDINATOR_TOKEN="+token, "CRABBOX_COORDINATOR_MODE=all")
	repo := gitRepo(t)
	// A lease made direct, before the coordinator was set, stays direct.
	warm := crabboxCmd(t, directEnv, repo, "warmup", "--json")
	if warm.code != 0 {
		t.Fatalf("direct warmup: exit %d, stderr %q", warm.code, warm.stderr)
	}
	var direct crabbox.LeaseInfo
	if err := json.Unmarshal([]byte(warm.stdout), &direct); err != nil {
		t.Fatal(err)
	}
	r := crabboxCmd(t, clientEnv, repo, "run", "--", "sh", "-c", "cat committed.txt; exit 5")
	if r.code != 5 || r.stdout != "committed\n" {
		t.Fatalf("brokered run: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}

	cc, err := coordclient.New(url, token)
	if err != nil {
		t.Fatal(err)
	}
	runs, err := cc.ListRuns(t.Context(), coordclient.ListRunsOptions{})
	if err != nil || len(runs) != 1 {
		t.Fatalf("runs = %+v, %v", runs, err)
	}
	if run := runs[0]; run.Owner != "alice" || run.ExitCode == nil || *run.ExitCode != 5 || run.State != api.RunFailed {
		t.Errorf("run = %+v", run)
	}
	l, err := cc.GetLease(t.Context(), runs[0].LeaseID)
	if err != nil || l.State != api.LeaseReleased {
		t.Errorf("lease = %+v, %v; want released", l, err)
	}
	cc.CloseIdleConnections()

	// With the coordinator set, the direct lease is listed, usable and
	// stoppable, and cleanup keeps it; a brokered lease beside it too.
	brokered := crabboxCmd(t, clientEnv, repo, "warmup", "--json")
	if brokered.code != 0 {
		t.Fatalf("brokered warmup: exit %d, stderr %q", brokered.code, brokered.stderr)
	}
	var brokeredInfo crabbox.LeaseInfo
	if err := json.Unmarshal([]byte(brokered.stdout), &brokeredInfo); err != nil {
		t.Fatal(err)
	}
	states := func(env []string) map[string]string {
		t.Helper()
		r := crabboxCmd(t, env, repo, "list", "--json")
		var infos []crabbox.LeaseInfo
		if err := json.Unmarshal([]byte(r.stdout), &infos); err != nil {
			t.Fatalf("list --json: %q (%v), stderr %q", r.stdout, err, r.stderr)
		}
		out := map[string]string{}
		for _, i := range infos {
			out[i.ID] = i.Route + " " + string(i.State)
		}
		return out
	}
	want := map[string]string{direct.ID: "direct ready", brokeredInfo.ID: "brokered ready"}
	if diff := cmp.Diff(want, states(clientEnv)); diff != "" {
		t.Errorf("list with the coordinator set (-want +got):\n%s", diff)
	}
	// Another machine of the same user (its own state directory) finds the
	// brokered lease through the coordinator, marked as made elsewhere.
	otherEnv := append(stateEnv(t), "CRABBOX_COORDINATOR="+url, "CRABBOX_COORDINATOR_TOKEN="+token)

	// The local history links the run to the coordinator's; the other
	// machine lists it as made elsewhere and prints its output.
	var hist []struct {
		RunID            string `json:"runId"`
		CoordinatorRunID string `json:"coordinatorRunId"`
		Elsewhere        bool   `json:"elsewhere"`
		ExitCode         int    `json:"exitCode"`
	}
	r = crabboxCmd(t, clientEnv, "", "history", "--json")
	if err := json.Unmarshal([]byte(r.stdout), &hist); r.code != 0 || err != nil || len(hist) != 1 || hist[0].CoordinatorRunID != runs[0].ID || hist[0].Elsewhere {
		t.Errorf("history: exit %d, stdout %q, stderr %q; want the run linked to %s", r.code, r.stdout, r.stderr, runs[0].ID)
	}
	r = crabboxCmd(t, otherEnv, "", "history", "--json")
	if err := json.Unmarshal([]byte(r.stdout), &hist); r.code != 0 || err != nil || len(hist) != 1 || hist[0].RunID != runs[0].ID || !hist[0].Elsewhere || hist[0].ExitCode != 5 {
		t.Errorf("history on another machine: exit %d, stdout %q, stderr %q; want the run, elsewhere", r.code, r.stdout, r.stderr)
	}
	if r := crabboxCmd(t, otherEnv, "", "logs", runs[0].ID); r.code != 0 || r.stdout != "committed\n" {
		t.Errorf("logs on another machine: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	r = crabboxCmd(t, otherEnv, "", "list", "--json")
	var elsewhere []crabbox.LeaseInfo
	if err := json.Unmarshal([]byte(r.stdout), &elsewhere); r.code != 0 || err != nil || len(elsewhere) != 1 ||
		elsewhere[0].ID != brokeredInfo.ID || !elsewhere[0].Elsewhere || elsewhere[0].State != crabbox.StateReady {
		t.Errorf("list on another machine: exit %d, stdout %q, stderr %q; want the brokered lease, elsewhere", r.code, r.stdout, r.stderr)
	}
	if r := crabboxCmd(t, otherEnv, "", "status", brokeredInfo.Slug); r.code != 0 || !strings.Contains(r.stdout, "made elsewhere") {
		t.Errorf("status on another machine: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	if r := crabboxCmd(t, append(stateEnv(t), "CRABBOX_COORDINATOR=http://127.0.0.1:1", "CRABBOX_COORDINATOR_TOKEN="+token), "", "list"); r.code != 0 || !strings.Contains(r.stderr, "coordinator leases not listed") {
		t.Errorf("list with the coordinator down: exit %d, stderr %q; want 0 and a warning", r.code, r.stderr)
	}
	if r := crabboxCmd(t, clientEnv, repo, "run", "--id", direct.Slug, "--", "cat", "committed.txt"); r.code != 0 || r.stdout != "committed\n" {
		t.Errorf("run --id on the direct lease with the coordinator set: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	if r := crabboxCmd(t, clientEnv, repo, "cleanup"); r.code != 0 {
		t.Errorf("cleanup: exit %d, stderr %q", r.code, r.stderr)
	}
	if diff := cmp.Diff(want, states(clientEnv)); diff != "" {
		t.Errorf("list after cleanup (-want +got):\n%s", diff)
	}
	// Without the coordinator, the brokered lease cannot be asked: it is
	// listed as unknown, and the direct one is still fine.
	want[brokeredInfo.ID] = "brokered unknown"
	if diff := cmp.Diff(want, states(directEnv)); diff != "" {
		t.Errorf("list without the coordinator (-want +got):\n%s", diff)
	}
	// An admin sees every owner's leases.
	adminEnv := append(stateEnv(t), "CRABBOX_COORDINATOR="+url, "CRABBOX_COORDINATOR_TOKEN="+adminToken)
	r = crabboxCmd(t, adminEnv, "", "admin", "leases", "--state", "active", "--json")
	var adminList struct{ Leases []api.Lease }
	if err := json.Unmarshal([]byte(r.stdout), &adminList); r.code != 0 || err != nil || len(adminList.Leases) != 1 ||
		adminList.Leases[0].ID != brokeredInfo.ID || adminList.Leases[0].Owner != "alice" {
		t.Errorf("admin leases: exit %d, stdout %q, stderr %q; want alice's active lease %s", r.code, r.stdout, r.stderr, brokeredInfo.ID)
	}
	if r := crabboxCmd(t, clientEnv, "", "admin", "leases"); r.code == 0 || !strings.Contains(r.stderr, "403") {
		t.Errorf("admin leases with a user token: exit %d, stderr %q; want 403", r.code, r.stderr)
	}

	for _, id := range []string{direct.ID, brokeredInfo.ID} {
		if r := crabboxCmd(t, clientEnv, repo, "stop", id); r.code != 0 {
			t.Errorf("stop %s: exit %d, stderr %q", id, r.code, r.stderr)
		}
	}
	if diff := cmp.Diff(map[string]string{}, states(clientEnv)); diff != "" {
		t.Errorf("list after stop (-want +got):\n%s", diff)
	}

	// The portal is served beside the API; / leads there.
	noFollow := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	for path, want := range map[string]int{"/": http.StatusSeeOther, "/portal/login": http.StatusOK, "/v1/health": http.StatusOK} {
		resp, err := noFollow.Get(url + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want || (path == "/" && resp.Header.Get("Location") != "/portal/") ||
			(path == "/portal/login" && !strings.Contains(resp.Header.Get("Content-Security-Policy"), "default-src 'none'")) {
			t.Errorf("GET %s: %d, Location %q, CSP %q", path, resp.StatusCode, resp.Header.Get("Location"), resp.Header.Get("Content-Security-Policy"))
		}
	}
	noFollow.CloseIdleConnections()

	// crabbox login saves the coordinator and token: later commands use
	// them without environment variables, until crabbox logout.
	loginEnv := append(stateEnv(t), "CRABBOX_COORDINATOR_MODE=all")
	r = runCLI(t, loginEnv, "", "wrong-token\n", "login", "--token", url)
	if r.code != 125 || !strings.Contains(r.stderr, "refused the token") {
		t.Errorf("login with a bad token: exit %d, stderr %q; want 125 and a refusal", r.code, r.stderr)
	}
	r = runCLI(t, loginEnv, "", token+"\n", "login", "--token", url)
	if r.code != 0 || !strings.HasPrefix(r.stdout, "Logged in to "+url+" as alice (org team") || strings.Contains(r.stdout+r.stderr, token) {
		t.Fatalf("login: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	r = crabboxCmd(t, loginEnv, "", "whoami", "--json")
	var who struct{ Coordinator, Owner, Org string }
	if err := json.Unmarshal([]byte(r.stdout), &who); r.code != 0 || err != nil || who.Owner != "alice" || who.Coordinator != url {
		t.Errorf("whoami after login: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	before, err := cc.ListRuns(t.Context(), coordclient.ListRunsOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if r := crabboxCmd(t, loginEnv, repo, "run", "--", "true"); r.code != 0 {
		t.Errorf("brokered run after login: exit %d, stderr %q", r.code, r.stderr)
	}
	if runs, err := cc.ListRuns(t.Context(), coordclient.ListRunsOptions{}); err != nil || len(runs) != len(before)+1 {
		t.Errorf("runs after a run with the saved login = %d, %v; want %d", len(runs), err, len(before)+1)
	}
	cc.CloseIdleConnections()
	r = crabboxCmd(t, loginEnv, "", "usage", "--json")
	var usage api.UsageResponse
	if err := json.Unmarshal([]byte(r.stdout), &usage); r.code != 0 || err != nil || usage.Usage.Owner != "alice" || usage.Usage.Leases == 0 {
		t.Errorf("usage --json: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	if r := crabboxCmd(t, loginEnv, "", "usage", "--org"); r.code != 0 || !strings.HasPrefix(r.stdout, "org team, ") || !strings.Contains(r.stdout, "\nPROVIDER ") || !strings.Contains(r.stdout, "limits: ") {
		t.Errorf("usage --org: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	if r := crabboxCmd(t, loginEnv, "", "usage", "--month", "May"); r.code != 2 || !strings.Contains(r.stderr, "want YYYY-MM") {
		t.Errorf("usage --month May: exit %d, stderr %q; want 2", r.code, r.stderr)
	}
	r = crabboxCmd(t, loginEnv, "", "config", "show")
	if r.code != 0 || !regexp.MustCompile(`(?m)^coordinator-token\s+<redacted>\s+login \S+login\.json$`).MatchString(r.stdout) {
		t.Errorf("config show after login: exit %d, stdout %q; want the token from the login file, redacted", r.code, r.stdout)
	}
	if r := crabboxCmd(t, loginEnv, "", "logout"); r.code != 0 || !strings.HasPrefix(r.stdout, "Logged out of "+url) {
		t.Errorf("logout: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	if r := crabboxCmd(t, loginEnv, "", "whoami"); r.code != 125 || !strings.Contains(r.stderr, "crabbox login") {
		t.Errorf("whoami after logout: exit %d, stderr %q; want a hint to log in", r.code, r.stderr)
	}

	msgs := server.stop(t)
	if !contains(msgs, "coordinator shutting down: finishing requests in flight") || !contains(msgs, "coordinator stopped") {
		t.Errorf("server log %q lacks the graceful shutdown", msgs)
	}
}

func contains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// served is a `crabbox coordinator serve` process: this test binary as
// crabbox-coordinator, which crabbox replaced itself with.
type served struct {
	url  string
	cmd  *exec.Cmd
	done chan struct{} // closed when its stderr ended
	msgs []string      // its log messages, complete once done is closed
}

// startCoordinator runs `crabbox coordinator serve` on SQLite with env
// and args (crabbox-coordinator is this test binary, on PATH), and returns
// it once it listens; it is killed when the test ends unless stop stopped
// it.
func startCoordinator(t *testing.T, env []string, args ...string) *served {
	t.Helper()
	db := "sqlite://" + filepath.ToSlash(filepath.Join(t.TempDir(), "coordinator.db"))
	cmd := exec.Command(os.Args[0], append([]string{"coordinator", "serve", "--listen", "127.0.0.1:0", "--db", db}, args...)...)
	cmd.Env = append(os.Environ(), append(append(stateEnv(t), "CRABBOX_TEST_MAIN=1", pathWith(t, testCoordinatorProgram(t))), env...)...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	s := &served{cmd: cmd, done: make(chan struct{})}
	listening := make(chan string, 1)
	go func() {
		defer close(s.done)
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			var m map[string]any
			if json.Unmarshal(sc.Bytes(), &m) != nil {
				m = map[string]any{"msg": "unparsed: " + sc.Text()}
			}
			msg, _ := m["msg"].(string)
			s.msgs = append(s.msgs, msg)
			if addr, _ := m["addr"].(string); msg == "coordinator listening" && addr != "" {
				listening <- "http://" + addr
			}
		}
	}()
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			cmd.Process.Kill()
			<-s.done
			cmd.Wait()
		}
	})
	select {
	case s.url = <-listening:
		return s
	case <-s.done:
		t.Fatalf("server never said where it listens; log %q", s.msgs)
		return nil
	}
}

// stop sends the server SIGTERM and returns its log messages once it
// exited.
func (s *served) stop(t *testing.T) []string {
	t.Helper()
	if err := s.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	<-s.done
	if err := s.cmd.Wait(); err != nil {
		t.Errorf("server exit: %v; log %q", err, s.msgs)
	}
	return s.msgs
}

// An admin lists tokens and revokes one minted offline by its ID: the
// token then gets 401 on whoami; a user token cannot use the admin
// commands.
func TestCoordinatorAdminTokens(t *testing.T) {
	t.Parallel()
	const adminToken = "admin-token-for-the-test-0123456789"
	url := startCoordinator(t, []string{"CRABBOX_SESSION_SECRET=" + testSecret, "CRABBOX_ADMIN_TOKEN=" + adminToken, "CRABBOX_TEST_MAIN=1", "GORACE=atexit_sleep_ms=0"}).url

	r := coordinatorCmd(t, []string{"CRABBOX_SESSION_SECRET=" + testSecret}, "", "token", "issue", "--owner", "alice", "--org", "team", "--json")
	var issued struct{ Token, ID string }
	if err := json.Unmarshal([]byte(r.stdout), &issued); r.code != 0 || err != nil || issued.ID == "" {
		t.Fatalf("token issue --json: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	userEnv := append(stateEnv(t), "CRABBOX_COORDINATOR="+url, "CRABBOX_COORDINATOR_TOKEN="+issued.Token)
	adminEnv := append(stateEnv(t), "CRABBOX_COORDINATOR="+url, "CRABBOX_COORDINATOR_TOKEN="+adminToken)
	if r := crabboxCmd(t, userEnv, "", "whoami"); r.code != 0 {
		t.Fatalf("whoami before revocation: exit %d, stderr %q", r.code, r.stderr)
	}
	if r := crabboxCmd(t, userEnv, "", "admin", "tokens"); r.code == 0 || !strings.Contains(r.stderr, "403") {
		t.Errorf("admin tokens with a user token: exit %d, stderr %q; want 403", r.code, r.stderr)
	}
	list := func() []api.Token {
		t.Helper()
		r := crabboxCmd(t, adminEnv, "", "admin", "tokens", "--json")
		var out api.TokensResponse
		if err := json.Unmarshal([]byte(r.stdout), &out); r.code != 0 || err != nil {
			t.Fatalf("admin tokens --json: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
		}
		return out.Tokens
	}
	if got := list(); len(got) != 0 {
		t.Errorf("tokens before any sign-in or revocation: %+v, want none", got)
	}
	if r := crabboxCmd(t, adminEnv, "", "admin", "revoke-token", "not-a-token-id"); r.code == 0 || !strings.Contains(r.stderr, "not a UUID") {
		t.Errorf("revoke-token with a bad ID: exit %d, stderr %q", r.code, r.stderr)
	}
	r = crabboxCmd(t, adminEnv, "", "admin", "revoke-token", issued.ID)
	if r.code != 0 || !strings.HasPrefix(r.stdout, "revoked "+issued.ID) {
		t.Fatalf("revoke-token: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	if got := list(); len(got) != 1 || got[0].ID != issued.ID || !got[0].Revoked {
		t.Errorf("tokens after the revocation: %+v, want the revoked ID", got)
	}
	if r := crabboxCmd(t, adminEnv, "", "admin", "tokens"); r.code != 0 || !strings.Contains(r.stdout, issued.ID) || !strings.HasPrefix(r.stdout, "ID ") {
		t.Errorf("admin tokens: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	if r := crabboxCmd(t, userEnv, "", "whoami"); r.code == 0 || !strings.Contains(r.stderr, "401") {
		t.Errorf("whoami with the revoked token: exit %d, stderr %q; want 401", r.code, r.stderr)
	}
}

// crabbox login without --token signs in with GitHub's device flow
// through the coordinator: it shows the code, waits, and saves the token
// the coordinator issued; a user GitHub does not allow gets none.
func TestLoginWithGitHub(t *testing.T) {
	t.Parallel()
	gh := githubtest.Start(t)
	gh.DeviceInterval(1)
	alice, bob := gh.AddUser("alice", 1), gh.AddUser("bob", 2)
	gh.SetOrg("acme", "alice", "active")
	cfg := filepath.Join(t.TempDir(), "coordinator.json")
	body := fmt.Sprintf(`{"providers":{"local":{}},"github":{"clientID":%q,"orgs":["acme"],"webURL":%q,"apiURL":%q}}`, githubtest.ClientID, gh.URL, gh.APIURL)
	if err := os.WriteFile(cfg, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	url := startCoordinator(t, []string{"CRABBOX_SESSION_SECRET=" + testSecret, "CRABBOX_GITHUB_CLIENT_SECRET=" + githubtest.ClientSecret,
		"CRABBOX_TEST_MAIN=1", "GORACE=atexit_sleep_ms=0"}, "--config", cfg).url

	env := stateEnv(t)
	gh.DevicePolls("pending", alice.Token)
	r := crabboxCmd(t, env, "", "login", url)
	if r.code != 0 || !strings.Contains(r.stderr, "enter the code ABCD-1234") || !strings.HasPrefix(r.stdout, "Logged in to "+url+" as alice (org acme") {
		t.Fatalf("login with GitHub: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	r = crabboxCmd(t, env, "", "whoami", "--json")
	var who struct{ Owner, Org string }
	if err := json.Unmarshal([]byte(r.stdout), &who); r.code != 0 || err != nil || who.Owner != "alice" || who.Org != "acme" {
		t.Errorf("whoami after GitHub login: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}

	other := stateEnv(t)
	gh.DevicePolls(bob.Token)
	if r := crabboxCmd(t, other, "", "login", url); r.code != 125 || !strings.Contains(r.stderr, "may not use this coordinator") {
		t.Errorf("login of a user GitHub does not allow: exit %d, stderr %q", r.code, r.stderr)
	}
	if r := crabboxCmd(t, other, "", "whoami"); r.code != 125 || !strings.Contains(r.stderr, "crabbox login") {
		t.Errorf("whoami after a refused login: exit %d, stderr %q", r.code, r.stderr)
	}
}
