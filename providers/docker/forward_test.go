package docker

import (
	"context"
	"io"
	"net"
	"net/http"
	"strconv"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/crabbox-dev/crabbox/lease"
	"github.com/crabbox-dev/crabbox/provider"
)

// A docker box forwards ports (crabbox forward, the coordinator's
// previews): a web server started in the container answers through a
// direct-tcpip channel of the lease's connection.
func TestBoxForwardsPorts(t *testing.T) {
	f := engine(t)
	b := newBackend(t, f)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	key, err := lease.NewKey()
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC()
	req := provider.AcquireRequest{
		LeaseID: lease.NewID(), Slug: "docker-forward", PublicKey: key.AuthorizedKey(),
		TTL: time.Hour, IdleTimeout: time.Hour, CreatedAt: now, ExpiresAt: now.Add(time.Hour),
	}
	removeLeftovers(t, b, req.LeaseID)
	target, err := b.Acquire(ctx, req)
	if err != nil {
		t.Fatalf("Acquire: %v", err)
	}
	t.Cleanup(func() { b.ReleaseLease(context.WithoutCancel(ctx), provider.ReleaseRequest{Lease: target}) })
	hostKey, err := lease.ParsePublicKey(target.HostKey)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := ssh.Dial("tcp", net.JoinHostPort(target.Host, strconv.Itoa(target.Port)), &ssh.ClientConfig{
		User: target.User, Auth: []ssh.AuthMethod{ssh.PublicKeys(key.Signer)}, HostKeyCallback: ssh.FixedHostKey(hostKey),
	})
	if err != nil {
		t.Fatalf("SSH to the box: %v", err)
	}
	defer conn.Close()

	// busybox httpd, on the container's loopback: without -f it detaches
	// once it listens (and goes with the container).
	sess, err := conn.NewSession()
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close()
	const script = `mkdir -p /tmp/site && echo 'hello from the container' >/tmp/site/index.html && busybox httpd -p 127.0.0.1:8080 -h /tmp/site`
	if out, err := sess.CombinedOutput(script); err != nil {
		t.Fatalf("start a web server on the box: %v\n%s", err, out)
	}
	hc := &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, addr string) (net.Conn, error) { return conn.DialContext(ctx, "tcp", addr) },
	}}
	defer hc.CloseIdleConnections()
	resp, err := hc.Get("http://127.0.0.1:8080/")
	if err != nil {
		t.Fatalf("through the box's port: %v", err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK || string(body) != "hello from the container\n" {
		t.Errorf("through the box's port: %d %q", resp.StatusCode, body)
	}
}
