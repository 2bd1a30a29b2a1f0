package cloudtest_test

import (
	"bytes"
	"io"
	"net"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/crabbox-dev/crabbox/lease"
	"github.com/crabbox-dev/crabbox/providers/internal/cloud"
	"github.com/crabbox-dev/crabbox/providers/internal/cloud/cloudtest"
)

// run runs cmd on the box at addr as the holder of key and returns its
// output.
func run(t *testing.T, addr string, key lease.Key, cmd string) string {
	t.Helper()
	return runInput(t, addr, key, cmd, "")
}

// runInput is run with stdin.
func runInput(t *testing.T, addr string, key lease.Key, cmd, stdin string) string {
	t.Helper()
	c, err := ssh.Dial("tcp", addr, &ssh.ClientConfig{
		User: cloud.DefaultUser, Auth: []ssh.AuthMethod{ssh.PublicKeys(key.Signer)},
		HostKeyCallback: func(string, net.Addr, ssh.PublicKey) error { return nil }, Timeout: time.Minute,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	s, err := c.NewSession()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var out, errOut bytes.Buffer
	s.Stdout, s.Stderr = &out, &errOut
	in, err := s.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(cmd); err != nil {
		t.Fatal(err)
	}
	// Stdin stays open, as crabbox's runs keep it: the command ends on
	// its own.
	if _, err := io.WriteString(in, stdin); err != nil {
		t.Fatal(err)
	}
	err = s.Wait()
	if err != nil {
		t.Fatalf("%s: %v\n%s%s", cmd, err, out.String(), errOut.String())
	}
	return out.String()
}

// Boxes with disks share a work root and a mount by path but not by
// file; an image is a copy of a box's disk, and a box booted from it
// starts with that copy.
func TestDisks(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("fake disks need /bin/sh and sed")
	}
	root := t.TempDir()
	work, installed := filepath.ToSlash(filepath.Join(root, "work root")), filepath.ToSlash(filepath.Join(root, "opt", "tool.d"))
	f := cloudtest.NewFleet(t)
	f.UseDisks(t, installed)
	key, err := lease.NewKey()
	if err != nil {
		t.Fatal(err)
	}
	hk, err := cloud.NewHostKey()
	if err != nil {
		t.Fatal(err)
	}
	ud, err := cloud.Bootstrap{AuthorizedKey: key.AuthorizedKey(), HostKey: hk, SelfDestructAfter: time.Hour, WorkRoot: work, Ports: []int{2222}}.UserData()
	if err != nil {
		t.Fatal(err)
	}
	a, b := f.NewAddress(), f.NewAddress()
	for _, ip := range []string{a, b} {
		if err := f.Boot(ip, ud); err != nil {
			t.Fatal(err)
		}
	}
	write := func(ip, v string) {
		run(t, f.Box(ip).Addr(), key, "mkdir -p '"+work+"/l' '"+installed+"' && printf "+v+" >'"+work+"/l/f' && printf "+v+" >'"+installed+"/tool'")
	}
	read := func(ip string) string {
		return run(t, f.Box(ip).Addr(), key, "cat '"+work+"/l/f' '"+installed+"/tool' 2>/dev/null || printf -; echo; cat l/f 2>/dev/null || printf -")
	}
	write(a, "a1")
	if got := runInput(t, f.Box(a).Addr(), key, "sh -s", "cat '"+work+"/l/f'\nexit\n"); got != "a1" {
		t.Errorf("a script on stdin reads %q, want a1", got)
	}
	if got := read(b); got != "-\n-" {
		t.Errorf("box b sees %q, want none of box a's files", got)
	}
	if err := f.SaveImage(a, "img-1"); err != nil {
		t.Fatal(err)
	}
	write(a, "a2")
	if err := f.BootImage(b, ud, "img-1"); err != nil { // a rebuild of b
		t.Fatal(err)
	}
	c := f.NewAddress()
	if err := f.BootImage(c, ud, "img-1"); err != nil { // a new box
		t.Fatal(err)
	}
	for ip, want := range map[string]string{a: "a2a2\na2", b: "a1a1\na1", c: "a1a1\na1"} {
		if got := read(ip); got != want {
			t.Errorf("box %s reads %q, want %q", ip, got, want)
		}
	}
	if err := f.BootImage(f.NewAddress(), ud, "img-2"); err == nil || !strings.Contains(err.Error(), "no image") {
		t.Errorf("BootImage from a missing image: %v", err)
	}
	if got := f.Images(); !slices.Equal(got, []string{"img-1"}) {
		t.Errorf("Images = %v, want [img-1]", got)
	}
	for range 2 {
		if err := f.DeleteImage("img-1"); err != nil {
			t.Fatal(err)
		}
	}
	if got := f.Images(); len(got) != 0 {
		t.Errorf("Images after DeleteImage = %v", got)
	}
}
