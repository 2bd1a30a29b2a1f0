package main

import (
	"bufio"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/crabbox-dev/crabbox/coordinator/auth"
	"github.com/crabbox-dev/crabbox/internal/clitest"
)

func TestCoordinatorTokenIssue(t *testing.T) {
	t.Parallel()
	env := append(clitest.StateEnv(t), "CRABBOX_SESSION_SECRET="+testSecret)
	r := coordinatorCmd(t, env, "token", "issue", "--owner", "alice", "--org", "team", "--ttl", "2h")
	if r.Code != 0 {
		t.Fatalf("exit %d, stderr %q", r.Code, r.Stderr)
	}
	claims, err := auth.ParseUserToken([]byte(testSecret), strings.TrimSpace(r.Stdout), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if claims.Owner != "alice" || claims.Org != "team" || claims.ExpiresAt.Sub(claims.IssuedAt) != 2*time.Hour {
		t.Errorf("claims = %+v", claims)
	}

	secretFile := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(secretFile, []byte(testSecret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	r = coordinatorCmd(t, clitest.StateEnv(t), "token", "issue", "--owner", "bob", "--org", "team", "--secret-file", secretFile, "--json")
	var out struct{ Token, Owner string }
	if r.Code != 0 || json.Unmarshal([]byte(r.Stdout), &out) != nil || out.Owner != "bob" {
		t.Fatalf("--json: exit %d, stdout %q, stderr %q", r.Code, r.Stdout, r.Stderr)
	}
	if _, err := auth.ParseUserToken([]byte(testSecret), out.Token, time.Now()); err != nil {
		t.Errorf("token from --secret-file: %v", err)
	}

	for _, tt := range []struct {
		env      []string
		args     []string
		code     int
		inStderr string
	}{
		{nil, []string{"--owner", "a", "--org", "g"}, 125, "no session secret"},
		{[]string{"CRABBOX_SESSION_SECRET=short"}, []string{"--owner", "a", "--org", "g"}, 125, "at least 32"},
		{[]string{"CRABBOX_SESSION_SECRET=" + testSecret}, []string{"--org", "g"}, 2, "--owner and --org are required"},
		{[]string{"CRABBOX_SESSION_SECRET=" + testSecret}, []string{"--owner", "a", "--org", "g", "--ttl", "-1h"}, 2, "positive duration"},
	} {
		r := coordinatorCmd(t, append(clitest.StateEnv(t), tt.env...), append([]string{"token", "issue"}, tt.args...)...)
		if r.Code != tt.code || !strings.Contains(r.Stderr, tt.inStderr) {
			t.Errorf("token issue %v: exit %d, stderr %q; want %d with %q", tt.args, r.Code, r.Stderr, tt.code, tt.inStderr)
		}
		if strings.Contains(r.Stderr, testSecret) {
			t.Errorf("stderr shows the secret: %q", r.Stderr)
		}
	}
}

func TestCoordinatorServeRejectsBadSetup(t *testing.T) {
	t.Parallel()
	cfg := filepath.Join(t.TempDir(), "coordinator.json")
	if err := os.WriteFile(cfg, []byte(`{"providers":{"local":{}},"limitz":{}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	ghCfg := filepath.Join(t.TempDir(), "github.json")
	if err := os.WriteFile(ghCfg, []byte(`{"providers":{"local":{}},"github":{"clientID":"Iv1.x","orgs":["acme"]}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		env      []string
		args     []string
		code     int
		inStderr string
	}{
		{nil, nil, 125, "no credentials configured"},
		{[]string{"CRABBOX_ADMIN_TOKEN=a", "CRABBOX_ADMIN_TOKEN_FILE=/x"}, nil, 125, "both CRABBOX_ADMIN_TOKEN and CRABBOX_ADMIN_TOKEN_FILE"},
		{[]string{"CRABBOX_ADMIN_TOKEN=a"}, []string{"--config", cfg}, 125, `unknown field "limitz"`},
		{[]string{"CRABBOX_ADMIN_TOKEN=a"}, []string{"--db", "mysql://x"}, 125, "want sqlite:///path or postgres://"},
		{[]string{"CRABBOX_ADMIN_TOKEN=a"}, []string{"--db", "postgres://u:hunter2@127.0.0.1/db"}, 2, "set CRABBOX_COORDINATOR_DB instead"},
		{[]string{"CRABBOX_SESSION_SECRET=" + testSecret}, []string{"--config", ghCfg}, 125, "needs the OAuth app's secret in CRABBOX_GITHUB_CLIENT_SECRET"},
		{[]string{"CRABBOX_ADMIN_TOKEN=a", "CRABBOX_GITHUB_CLIENT_SECRET=s"}, []string{"--config", ghCfg}, 125, "github sign-in needs CRABBOX_SESSION_SECRET"},
	} {
		r := coordinatorCmd(t, append(clitest.StateEnv(t), tt.env...), append([]string{"serve", "--listen", "127.0.0.1:0"}, tt.args...)...)
		if r.Code != tt.code || !strings.Contains(r.Stderr, tt.inStderr) {
			t.Errorf("serve %v %v: exit %d, stderr %q; want %d with %q", tt.env, tt.args, r.Code, r.Stderr, tt.code, tt.inStderr)
		}
		if strings.Contains(r.Stderr, "hunter2") {
			t.Errorf("stderr shows the password: %q", r.Stderr)
		}
	}
}

// serve listens, answers health, and on SIGTERM finishes what is in flight,
// stops and exits 0, saying so in its JSON log.
func TestServeStopsGracefully(t *testing.T) {
	t.Parallel()
	db := "sqlite://" + filepath.ToSlash(filepath.Join(t.TempDir(), "coordinator.db"))
	cmd := exec.Command(os.Args[0], "serve", "--listen", "127.0.0.1:0", "--db", db)
	cmd.Env = append(os.Environ(), append(clitest.StateEnv(t), "CRABBOX_TEST_MAIN=1", "GORACE=atexit_sleep_ms=0", "CRABBOX_ADMIN_TOKEN=admin-token-for-the-test-0123456789")...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			cmd.Process.Kill()
			cmd.Wait()
		}
	})
	var msgs []string
	sc := bufio.NewScanner(stderr)
	url := ""
	for url == "" && sc.Scan() {
		var m struct{ Msg, Addr string }
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("log line %q is not JSON: %v", sc.Text(), err)
		}
		msgs = append(msgs, m.Msg)
		if m.Msg == "coordinator listening" {
			url = "http://" + m.Addr
		}
	}
	if url == "" {
		t.Fatalf("server never said where it listens; log %q", msgs)
	}
	resp, err := http.Get(url + "/v1/health")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	http.DefaultClient.CloseIdleConnections()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("GET /v1/health: %d", resp.StatusCode)
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	for sc.Scan() {
		var m struct{ Msg string }
		json.Unmarshal(sc.Bytes(), &m)
		msgs = append(msgs, m.Msg)
	}
	if err := cmd.Wait(); err != nil {
		t.Errorf("exit after SIGTERM: %v; log %q", err, msgs)
	}
	if !strings.Contains(strings.Join(msgs, "\n"), "coordinator shutting down: finishing requests in flight\ncoordinator stopped") {
		t.Errorf("log %q lacks the graceful shutdown", msgs)
	}
}
