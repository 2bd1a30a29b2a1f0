package cloudtest_test

import (
	"bytes"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
	"golang.org/x/crypto/ssh"

	"github.com/crabbox-dev/crabbox/lease"
	"github.com/crabbox-dev/crabbox/providers/internal/cloud"
	"github.com/crabbox-dev/crabbox/providers/internal/cloud/cloudtest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestStartBoxRejectsBadUserData(t *testing.T) {
	if _, err := cloudtest.StartBox("#!/bin/sh\necho hi\n", nil); err == nil || !strings.Contains(err.Error(), "fake box: user data") {
		t.Errorf("StartBox of foreign user data: %v", err)
	}
}

func TestFleet(t *testing.T) {
	f := cloudtest.NewFleet(t)
	seen := map[string]bool{}
	for range 600 {
		ip := f.NewAddress()
		if seen[ip] || !(strings.HasPrefix(ip, "192.0.2.") || strings.HasPrefix(ip, "198.51.100.") || strings.HasPrefix(ip, "203.0.113.")) {
			t.Fatalf("address %s repeated or outside the documentation ranges", ip)
		}
		seen[ip] = true
	}
	key, err := lease.NewKey()
	if err != nil {
		t.Fatal(err)
	}
	hk, err := cloud.NewHostKey()
	if err != nil {
		t.Fatal(err)
	}
	ud, err := cloud.Bootstrap{AuthorizedKey: key.AuthorizedKey(), HostKey: hk, SelfDestructAfter: time.Hour, WorkRoot: t.TempDir(), Ports: []int{2222}}.UserData()
	if err != nil {
		t.Fatal(err)
	}
	ip := f.NewAddress()
	if err := f.Boot(ip, ud); err != nil {
		t.Fatal(err)
	}
	box := f.Box(ip)
	if h, p := f.MapAddress(ip, 2222); h != box.Host || p != box.Port {
		t.Errorf("MapAddress(%s, 2222) = %s:%d, want the box at %s", ip, h, p, box.Addr())
	}
	if _, p := f.MapAddress(ip, 22); p == box.Port {
		t.Errorf("port 22 maps to the box, though its user data listens on 2222 only")
	}
	f.Block(ip, 2222)
	if _, p := f.MapAddress(ip, 2222); p == box.Port {
		t.Errorf("a blocked port maps to the box")
	}
	f.Unblock(ip, 2222)
	if err := f.Boot(ip, ud); err != nil { // a reboot replaces the box
		t.Fatal(err)
	}
	if f.Box(ip) == box {
		t.Errorf("Boot at a taken address kept the old box")
	}
	if err := box.Close(); err != nil { // closing twice is fine
		t.Errorf("second Close: %v", err)
	}
}

// A loopback fleet's boxes listen on their own loopback address at the
// first free SSH port of their user data, where another process reaches
// them without a mapper.
func TestLoopbackFleet(t *testing.T) {
	if err := cloudtest.CheckLoopback(); err != nil {
		t.Skipf("needs all of 127.0.0.0/8 on loopback: %v", err)
	}
	f := cloudtest.NewLoopbackFleet(t)
	// The first port is taken on every address: the box takes the next.
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	free, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	freePort := free.Addr().(*net.TCPAddr).Port
	free.Close()
	ports := []int{taken.Addr().(*net.TCPAddr).Port, freePort}
	key, err := lease.NewKey()
	if err != nil {
		t.Fatal(err)
	}
	hk, err := cloud.NewHostKey()
	if err != nil {
		t.Fatal(err)
	}
	ud, err := cloud.Bootstrap{AuthorizedKey: key.AuthorizedKey(), HostKey: hk, SelfDestructAfter: time.Hour, WorkRoot: t.TempDir(), Ports: ports}.UserData()
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for range 3 {
		ip := f.NewAddress()
		if seen[ip] || !strings.HasPrefix(ip, "127.") || ip == "127.0.0.1" {
			t.Fatalf("address %s repeated, not loopback, or 127.0.0.1", ip)
		}
		seen[ip] = true
		// The taken port is taken on 127.0.0.1 only; take it on ip too.
		l, err := net.Listen("tcp", net.JoinHostPort(ip, fmt.Sprint(ports[0])))
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		if err := f.Boot(ip, ud); err != nil {
			t.Fatal(err)
		}
		box := f.Box(ip)
		if box.Host != ip || box.Port != freePort {
			t.Fatalf("box at %s listens on %s, want %s:%d", ip, box.Addr(), ip, freePort)
		}
		if h, p := f.MapAddress(ip, freePort); h != ip || p != freePort {
			t.Errorf("MapAddress(%s, %d) = %s:%d, want itself", ip, freePort, h, p)
		}
		checkSSH(t, box.Addr(), hk.PublicKey())
	}
	// A reboot listens where the box did.
	ip := f.Running()[0]
	if err := f.Boot(ip, ud); err != nil {
		t.Fatal(err)
	}
	checkSSH(t, f.Box(ip).Addr(), hk.PublicKey())
}

// checkSSH fails t unless an SSH server with hostKey answers at addr.
func checkSSH(t *testing.T, addr string, hostKey ssh.PublicKey) {
	t.Helper()
	var got ssh.PublicKey
	c, err := ssh.Dial("tcp", addr, &ssh.ClientConfig{
		User: "crabbox", Auth: []ssh.AuthMethod{ssh.Password("no")},
		HostKeyCallback: func(_ string, _ net.Addr, k ssh.PublicKey) error { got = k; return nil },
		Timeout:         time.Minute,
	})
	if err == nil {
		c.Close()
		t.Fatalf("%s accepted a password", addr)
	}
	if got == nil || !bytes.Equal(got.Marshal(), hostKey.Marshal()) {
		t.Errorf("%s: host key %v, want the user data's (%v)", addr, got, err)
	}
}
