// Package sshservertest starts crabbox's own SSH server on loopback for a
// test and connects a client to it.
package sshservertest

import (
	"crypto/ed25519"
	"crypto/rand"
	"net"
	"testing"

	"golang.org/x/crypto/ssh"

	"github.com/crabbox-dev/crabbox/internal/sshserver"
)

// Dial starts a server for the test, with requests as its global request
// handlers (nil for none), and returns a client connected to it. The
// test's cleanup closes the client, then the server, and reports a server
// that failed.
func Dial(t testing.TB, requests map[string]func([]byte) (bool, []byte)) *ssh.Client {
	t.Helper()
	hostKey, clientKey := NewSigner(t), NewSigner(t)
	addr := Serve(t, sshserver.Config{
		HostKey: hostKey, AuthorizedKey: clientKey.PublicKey(), Dir: t.TempDir(), Requests: requests,
	})
	c, err := ssh.Dial("tcp", addr.String(), &ssh.ClientConfig{
		User: "crabbox", Auth: []ssh.AuthMethod{ssh.PublicKeys(clientKey)},
		HostKeyCallback: ssh.FixedHostKey(hostKey.PublicKey()),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// Serve serves a server of cfg on a loopback port for the test and
// returns its address. The test's cleanup closes the server and reports
// one that failed.
func Serve(t testing.TB, cfg sshserver.Config) *net.TCPAddr {
	t.Helper()
	srv, err := sshserver.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(l) }()
	t.Cleanup(func() {
		if err := srv.Close(); err != nil {
			t.Errorf("close the SSH server: %v", err)
		}
		if err := <-served; err != nil {
			t.Errorf("SSH server: %v", err)
		}
	})
	return l.Addr().(*net.TCPAddr)
}

// NewSigner returns a fresh ed25519 key.
func NewSigner(t testing.TB) ssh.Signer {
	t.Helper()
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	s, err := ssh.NewSignerFromKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	return s
}
