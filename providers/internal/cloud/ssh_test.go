package cloud_test

import (
	"context"
	"errors"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"golang.org/x/crypto/ssh"

	"github.com/crabbox-dev/crabbox/providers/internal/cloud"
	"github.com/crabbox-dev/crabbox/providers/internal/cloud/cloudtest"
)

// mappedDial dials the fleet's real address for a fake public address.
func mappedDial(f *cloudtest.Fleet) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		host, port, err := net.SplitHostPort(addr)
		if err != nil {
			return nil, err
		}
		p, _ := strconv.Atoi(port)
		h, p := f.MapAddress(host, p)
		var d net.Dialer
		return d.DialContext(ctx, network, net.JoinHostPort(h, strconv.Itoa(p)))
	}
}

// bootBox boots a fake box from freshly rendered user data.
func bootBox(t *testing.T, f *cloudtest.Fleet) (ip string, b cloud.Bootstrap, key ssh.Signer) {
	t.Helper()
	lk := newLeaseKey(t)
	b = bootstrap(t)
	b.AuthorizedKey, b.WorkRoot = lk.AuthorizedKey(), t.TempDir()
	ud, err := b.UserData()
	if err != nil {
		t.Fatal(err)
	}
	ip = f.NewAddress()
	if err := f.Boot(ip, ud); err != nil {
		t.Fatal(err)
	}
	return ip, b, lk.Signer
}

func TestWaitForSSHAndFakeBox(t *testing.T) {
	f := cloudtest.NewFleet(t)
	ip, b, key := bootBox(t, f)
	for _, tt := range []struct {
		name     string
		block    []int
		wantPort int
	}{{"first port", nil, 2222}, {"fallback port", []int{2222}, 22}} {
		t.Run(tt.name, func(t *testing.T) {
			for _, p := range tt.block {
				f.Block(ip, p)
				defer f.Unblock(ip, p)
			}
			port, err := cloud.WaitForSSH(context.Background(), cloud.SSHWait{
				Host: ip, HostKey: b.HostKey.PublicKey(), Dial: mappedDial(f), Clock: clockwork.NewFakeClock(),
			})
			if err != nil || port != tt.wantPort {
				t.Fatalf("WaitForSSH = %d, %v; want port %d", port, err, tt.wantPort)
			}
			host, realPort := f.MapAddress(ip, port)
			client, err := ssh.Dial("tcp", net.JoinHostPort(host, strconv.Itoa(realPort)), &ssh.ClientConfig{
				User: cloud.DefaultUser, Auth: []ssh.AuthMethod{ssh.PublicKeys(key)},
				HostKeyCallback: ssh.FixedHostKey(b.HostKey.PublicKey()), Timeout: 10 * time.Second,
			})
			if err != nil {
				t.Fatalf("SSH with the lease key and the injected host key: %v", err)
			}
			defer client.Close()
			sess, err := client.NewSession()
			if err != nil {
				t.Fatal(err)
			}
			defer sess.Close()
			out, err := sess.Output("pwd")
			if err != nil || strings.TrimSpace(string(out)) != b.WorkRoot {
				t.Errorf("pwd on the box = %q, %v; want the work root %s", out, err, b.WorkRoot)
			}
		})
	}
	if diff := f.Running(); len(diff) != 1 || diff[0] != ip {
		t.Errorf("Running = %v, want [%s]", diff, ip)
	}
	if err := f.Halt(ip); err != nil {
		t.Fatal(err)
	}
	if h, p := f.MapAddress(ip, 2222); h != "127.0.0.1" || p == 0 {
		t.Errorf("MapAddress of a halted box = %s:%d", h, p)
	}
}

func TestWaitForSSHWrongHostKeyTimesOut(t *testing.T) {
	f := cloudtest.NewFleet(t)
	ip, _, _ := bootBox(t, f)
	other := newHostKey(t)
	clock := clockwork.NewFakeClock()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	type result struct {
		port int
		err  error
	}
	done := make(chan result, 1)
	go func() {
		port, err := cloud.WaitForSSH(ctx, cloud.SSHWait{
			Host: ip, HostKey: other.PublicKey(), Dial: mappedDial(f), Clock: clock,
			Interval: 30 * time.Second, Timeout: time.Minute,
		})
		done <- result{port, err}
	}()
	for range 2 {
		if err := clock.BlockUntilContext(ctx, 1); err != nil {
			t.Fatal(err)
		}
		clock.Advance(30 * time.Second)
	}
	r := <-done
	if r.err == nil || !strings.Contains(r.err.Error(), "did not answer SSH with its host key within 1m0s") ||
		!strings.Contains(r.err.Error(), "box answers with host key") {
		t.Errorf("WaitForSSH = %d, %v; want a timeout naming the wrong host key", r.port, r.err)
	}
}

// TestWaitForSSHHangCancelled: a box that accepts connections but never
// speaks SSH does not hold the wait once the context ends.
func TestWaitForSSHHangCancelled(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := l.Accept()
		if err == nil {
			accepted <- c
			cancel()
		}
	}()
	_, err = cloud.WaitForSSH(ctx, cloud.SSHWait{
		Host: "127.0.0.1", Ports: []int{l.Addr().(*net.TCPAddr).Port}, HostKey: newHostKey(t).PublicKey(),
	})
	if !errors.Is(err, context.Canceled) {
		t.Errorf("WaitForSSH = %v, want context.Canceled", err)
	}
	(<-accepted).Close()
}

func TestWaitForSSHNeedsHostKey(t *testing.T) {
	if _, err := cloud.WaitForSSH(context.Background(), cloud.SSHWait{Host: "127.0.0.1"}); err == nil {
		t.Error("WaitForSSH without a host key: no error")
	}
}

func TestMappedDial(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	real := ln.Addr().(*net.TCPAddr)
	toLoopback := func(host string, port int) (string, int) {
		if host == "203.0.113.7" && port == 22 {
			return "127.0.0.1", real.Port
		}
		return host, port
	}
	c, err := cloud.MappedDial(toLoopback)(t.Context(), "tcp", "203.0.113.7:22")
	if err != nil {
		t.Fatalf("mapped dial: %v", err)
	}
	c.Close()
	c, err = cloud.MappedDial(nil)(t.Context(), "tcp", real.String())
	if err != nil {
		t.Fatalf("unmapped dial: %v", err)
	}
	c.Close()
	if _, err := cloud.MappedDial(toLoopback)(t.Context(), "tcp", "203.0.113.7:ssh"); err == nil || !strings.Contains(err.Error(), "bad port") {
		t.Errorf("dial with a named port: %v, want a bad port error", err)
	}
}
