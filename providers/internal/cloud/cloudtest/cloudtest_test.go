package cloudtest_test

import (
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

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
