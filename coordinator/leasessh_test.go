package coordinator_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/coder/websocket"
	"github.com/google/go-cmp/cmp"
	"golang.org/x/crypto/ssh"

	"github.com/crabbox-dev/crabbox"
	"github.com/crabbox-dev/crabbox/coordinator"
	"github.com/crabbox-dev/crabbox/coordinator/api"
	coordclient "github.com/crabbox-dev/crabbox/coordinator/client"
)

// relayError is a refusal of GET /v1/leases/{id}/ssh: its status and
// error body.
type relayError struct {
	status int
	body   api.Error
}

func (e *relayError) Error() string { return e.body.Message }

// sshThrough opens SSH to lease id's box through the coordinator's relay
// as token's user, checking the relay's host key against the one its
// answer names. A refusal is a *relayError.
func (bc *boxCoordinator) sshThrough(t *testing.T, token, id string) (*ssh.Client, error) {
	t.Helper()
	url := "ws" + strings.TrimPrefix(bc.url, "http") + "/v1/leases/" + id + "/ssh"
	ws, resp, err := websocket.Dial(t.Context(), url, &websocket.DialOptions{
		HTTPClient: bc.ts.Client(), HTTPHeader: http.Header{"Authorization": {"Bearer " + token}},
	})
	if err != nil {
		if resp == nil {
			t.Fatalf("dial the relay: %v", err)
		}
		e := &relayError{status: resp.StatusCode}
		if resp.Body != nil {
			_ = json.NewDecoder(resp.Body).Decode(&e.body)
		}
		return nil, e
	}
	hostKey, _, _, _, err := ssh.ParseAuthorizedKey([]byte(resp.Header.Get(api.SSHRelayHostKeyHeader)))
	if err != nil {
		ws.CloseNow()
		t.Fatalf("relay host key header %q: %v", resp.Header.Get(api.SSHRelayHostKeyHeader), err)
	}
	conn := websocket.NetConn(context.Background(), ws, websocket.MessageBinary)
	sc, chans, reqs, err := ssh.NewClientConn(conn, "relay", &ssh.ClientConfig{User: "crabbox", HostKeyCallback: ssh.FixedHostKey(hostKey)})
	if err != nil {
		conn.Close()
		t.Fatalf("SSH handshake through the relay: %v", err)
	}
	c := ssh.NewClient(sc, chans, reqs)
	t.Cleanup(func() { c.Close() })
	return c, nil
}

// sharedLease is a lease of alice's, reached once by her library (which
// installed the coordinator's access key), shared with bob to use and
// carol to read.
func sharedLease(t *testing.T, bc *boxCoordinator) (*crabbox.Lease, *coordclient.Client) {
	t.Helper()
	ctx := t.Context()
	l, err := bc.client(t, "alice").Acquire(ctx, crabbox.AcquireOptions{Provider: "local"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Release(context.Background()) })
	if _, err := l.SSH(ctx); err != nil {
		t.Fatal(err)
	}
	alice, err := coordclient.New(bc.url, bc.token(t, "alice"), coordclient.WithHTTPClient(bc.ts.Client()))
	if err != nil {
		t.Fatal(err)
	}
	share := api.LeaseShare{Users: map[string]api.ShareRole{"bob": api.ShareUse, "carol": api.ShareRead}}
	if _, err := alice.UpdateLeaseShare(ctx, l.ID(), share); err != nil {
		t.Fatal(err)
	}
	return l, alice
}

func TestLeaseSSHForUseSharer(t *testing.T) {
	bc := newBoxCoordinator(t)
	l, _ := sharedLease(t, bc)
	c, err := bc.sshThrough(t, bc.token(t, "bob"), l.ID())
	if err != nil {
		t.Fatal(err)
	}
	sess, err := c.NewSession()
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	sess.Stdout = &out
	err = sess.Run("echo $((6*7)); exit 5")
	sess.Close()
	var exit *ssh.ExitError
	if !errors.As(err, &exit) || exit.ExitStatus() != 5 || out.String() != "42\n" {
		t.Errorf("exec through the relay = %q, %v; want 42 and exit status 5", out.String(), err)
	}

	// An interactive shell on a terminal.
	sess, err = c.NewSession()
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close()
	if err := sess.RequestPty("xterm", 30, 90, ssh.TerminalModes{ssh.ECHO: 0}); err != nil {
		t.Fatal(err)
	}
	in, _ := sess.StdinPipe()
	stdout, _ := sess.StdoutPipe()
	if err := sess.Shell(); err != nil {
		t.Fatal(err)
	}
	if _, err := io.WriteString(in, "stty size; pwd; exit\n"); err != nil {
		t.Fatal(err)
	}
	all, _ := io.ReadAll(stdout)
	if !strings.Contains(string(all), "30 90") || !strings.Contains(string(all), l.Target().WorkRoot) {
		t.Errorf("shell output %q, want the terminal size and the work root", all)
	}
	if err := sess.Wait(); err != nil {
		t.Errorf("shell: %v", err)
	}

	// The owner may use the relay too.
	if _, err := bc.sshThrough(t, bc.token(t, "alice"), l.ID()); err != nil {
		t.Errorf("owner through the relay: %v", err)
	}
}

func TestLeaseSSHRefusals(t *testing.T) {
	bc := newBoxCoordinator(t)
	l, _ := sharedLease(t, bc)
	for _, tt := range []struct {
		name, owner, id string
		status          int
		code, says      string
	}{
		{"reader", "carol", l.ID(), http.StatusForbidden, api.CodeForbidden, "shared with you to read"},
		{"stranger", "dave", l.ID(), http.StatusNotFound, api.CodeNotFound, l.ID()},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := bc.sshThrough(t, bc.token(t, tt.owner), tt.id)
			var re *relayError
			if !errors.As(err, &re) || re.status != tt.status || re.body.Code != tt.code || !strings.Contains(re.body.Message, tt.says) {
				t.Errorf("relay for %s = %+v, want %d %s saying %q", tt.owner, re, tt.status, tt.code, tt.says)
			}
		})
	}
	// A plain GET is not a websocket.
	req, _ := http.NewRequestWithContext(t.Context(), "GET", bc.url+"/v1/leases/"+l.ID()+"/ssh", nil)
	req.Header.Set("Authorization", "Bearer "+bc.token(t, "bob"))
	resp, err := bc.ts.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUpgradeRequired {
		t.Errorf("plain GET = %d, want 426", resp.StatusCode)
	}
}

// TestLeaseSSHRevoked: revoking bob's share ends his open SSH through the
// coordinator at once, a running command's included.
func TestLeaseSSHRevoked(t *testing.T) {
	bc := newBoxCoordinator(t)
	l, alice := sharedLease(t, bc)
	c, err := bc.sshThrough(t, bc.token(t, "bob"), l.ID())
	if err != nil {
		t.Fatal(err)
	}
	sess, err := c.NewSession()
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close()
	out, _ := sess.StdoutPipe()
	if err := sess.Start("echo started; sleep 60"); err != nil {
		t.Fatal(err)
	}
	if line, err := bufio.NewReader(out).ReadString('\n'); err != nil || line != "started\n" {
		t.Fatalf("first line %q, %v", line, err)
	}
	if _, err := alice.DeleteLeaseShare(t.Context(), l.ID(), api.ShareDeleteRequest{User: "bob"}); err != nil {
		t.Fatal(err)
	}
	if err := c.Wait(); err == nil {
		t.Error("the relay's connection ended cleanly, want it cut")
	}
	_, err = bc.sshThrough(t, bc.token(t, "bob"), l.ID())
	var re *relayError
	if !errors.As(err, &re) || re.status != http.StatusNotFound {
		t.Errorf("relay after the revoke = %v, want 404", err)
	}
}

func TestLeaseSSHLimit(t *testing.T) {
	bc := newBoxCoordinator(t, func(c *coordinator.Config) { c.MaxSSHRelaysPerIdentity = 1 })
	l, _ := sharedLease(t, bc)
	bob := bc.token(t, "bob")
	first, err := bc.sshThrough(t, bob, l.ID())
	if err != nil {
		t.Fatal(err)
	}
	_, err = bc.sshThrough(t, bob, l.ID())
	var re *relayError
	if !errors.As(err, &re) || re.status != http.StatusTooManyRequests || !strings.Contains(re.body.Message, "close one first") {
		t.Errorf("a second relay = %v, want 429", err)
	}
	// Another identity has its own allowance.
	if _, err := bc.sshThrough(t, bc.token(t, "alice"), l.ID()); err != nil {
		t.Errorf("alice's relay while bob holds his: %v", err)
	}
	first.Close()
	// Bob's slot comes back once the coordinator saw his relay end: a
	// third relay is let in eventually (the close is asynchronous).
	for {
		c, err := bc.sshThrough(t, bob, l.ID())
		if err == nil {
			c.Close()
			break
		}
		if !errors.As(err, &re) || re.status != http.StatusTooManyRequests {
			t.Fatalf("relay after closing the first = %v", err)
		}
	}
}

// TestLeaseSSHWithoutAccessKey: a box whose owner's client did not
// install the coordinator's access key (the upstream client) cannot be
// reached through the relay, and the answer says why.
func TestLeaseSSHWithoutAccessKey(t *testing.T) {
	bc := newBoxCoordinator(t)
	alice, err := coordclient.New(bc.url, bc.token(t, "alice"), coordclient.WithHTTPClient(bc.ts.Client()))
	if err != nil {
		t.Fatal(err)
	}
	req := leaseReq(t)
	req.Provider = "local"
	l, err := alice.CreateLease(t.Context(), req)
	if err != nil {
		t.Fatal(err)
	}
	defer alice.Release(context.Background(), l.ID, api.ReleaseRequest{})
	_, err = bc.sshThrough(t, bc.token(t, "alice"), l.ID)
	var re *relayError
	if !errors.As(err, &re) {
		t.Fatalf("relay to a box without the access key = %v, want a refusal", err)
	}
	if diff := cmp.Diff([]any{http.StatusConflict, api.CodeNoBoxAccess, true}, []any{re.status, re.body.Code, strings.Contains(re.body.Message, "did not install it")}); diff != "" {
		t.Errorf("refusal %q (-want +got):\n%s", re.body.Message, diff)
	}
}
