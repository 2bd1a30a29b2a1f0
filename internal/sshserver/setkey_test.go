package sshserver

import (
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/crypto/ssh"
)

// canLogIn reports whether a new connection with key authenticates.
func (ts *testServer) canLogIn(t *testing.T, key ssh.Signer) bool {
	t.Helper()
	c, err := ts.dial("crabbox", key)
	if err != nil {
		if !strings.Contains(err.Error(), "unable to authenticate") {
			t.Fatalf("dial failed for another reason than authentication: %v", err)
		}
		return false
	}
	_ = c.Close()
	return true
}

func TestSetKeyReplacesTheAuthorizedKey(t *testing.T) {
	var mu sync.Mutex
	var persisted []string
	ts := startServer(t, func(c *Config) {
		c.OnSetKey = func(ks []ssh.PublicKey) error {
			mu.Lock()
			defer mu.Unlock()
			for _, k := range ks {
				persisted = append(persisted, ssh.FingerprintSHA256(k))
			}
			return nil
		}
	})
	old := ts.client(t)
	next := newSigner(t)

	ok, _, err := old.SendRequest(SetKeyRequest, true, next.PublicKey().Marshal())
	if err != nil || !ok {
		t.Fatalf("set-key request = %v, %v; want accepted", ok, err)
	}
	if ts.canLogIn(t, ts.clientKey) {
		t.Error("a new connection with the old key was accepted")
	}
	if !ts.canLogIn(t, next) {
		t.Error("a new connection with the new key was refused")
	}
	// The connection that set the key stays usable.
	sess, err := old.NewSession()
	if err != nil {
		t.Fatalf("the old connection is gone: %v", err)
	}
	_ = sess.Close()
	mu.Lock()
	defer mu.Unlock()
	if diff := cmp.Diff([]string{ssh.FingerprintSHA256(next.PublicKey())}, persisted); diff != "" {
		t.Errorf("OnSetKey calls (-want +got):\n%s", diff)
	}
}

func TestSetKeyWithoutOnSetKey(t *testing.T) {
	ts := startServer(t, nil)
	next := newSigner(t)
	ok, _, err := ts.client(t).SendRequest(SetKeyRequest, true, next.PublicKey().Marshal())
	if err != nil || !ok {
		t.Fatalf("set-key request = %v, %v; want accepted", ok, err)
	}
	if ts.canLogIn(t, ts.clientKey) || !ts.canLogIn(t, next) {
		t.Error("the new key did not replace the old one")
	}
}

func TestSetKeyRefusalsChangeNothing(t *testing.T) {
	next := newSigner(t)
	cert := &ssh.Certificate{Key: next.PublicKey(), CertType: ssh.UserCert, ValidPrincipals: []string{"crabbox"}, ValidBefore: ssh.CertTimeInfinity}
	if err := cert.SignCert(strings.NewReader(strings.Repeat("x", 1024)), next); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name     string
		payload  []byte
		onSetKey func([]ssh.PublicKey) error
	}{
		{"empty payload", nil, nil},
		{"garbage", []byte("ssh-ed25519 AAAA not the wire form"), nil},
		{"trailing bytes", append(next.PublicKey().Marshal(), 0), nil},
		{"truncated key", next.PublicKey().Marshal()[:20], nil},
		{"certificate", cert.Marshal(), nil},
		{"OnSetKey fails", next.PublicKey().Marshal(), func([]ssh.PublicKey) error { return errors.New("disk full") }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ts := startServer(t, func(c *Config) { c.OnSetKey = tt.onSetKey })
			ok, _, err := ts.client(t).SendRequest(SetKeyRequest, true, tt.payload)
			if err != nil {
				t.Fatal(err)
			}
			if ok {
				t.Error("set-key request accepted, want refused")
			}
			if !ts.canLogIn(t, ts.clientKey) {
				t.Error("the old key no longer logs in")
			}
			if ts.canLogIn(t, next) {
				t.Error("the refused key logs in")
			}
		})
	}
}

// TestSetKeyNeedsAuthentication: global requests exist only on an
// authenticated connection, so a client without the key never reaches
// the handler, and the key stays.
func TestSetKeyNeedsAuthentication(t *testing.T) {
	called := make(chan struct{}, 1)
	ts := startServer(t, func(c *Config) {
		c.OnSetKey = func([]ssh.PublicKey) error { called <- struct{}{}; return nil }
	})
	intruder := newSigner(t)
	if c, err := ts.dial("crabbox", intruder); err == nil {
		_ = c.Close()
		t.Fatal("a client with another key authenticated")
	}
	if !ts.canLogIn(t, ts.clientKey) || ts.canLogIn(t, intruder) {
		t.Error("the authorized key changed")
	}
	select {
	case <-called:
		t.Error("OnSetKey was called for an unauthenticated client")
	default:
	}
}

func TestSetKeyCannotBeAHandler(t *testing.T) {
	key := newSigner(t)
	_, err := New(Config{
		HostKey: key, AuthorizedKey: key.PublicKey(), Dir: t.TempDir(),
		Requests: map[string]func([]byte) (bool, []byte){SetKeyRequest: func([]byte) (bool, []byte) { return true, nil }},
	})
	if err == nil || !strings.Contains(err.Error(), SetKeyRequest) {
		t.Fatalf("New with a %s handler: err = %v, want one naming it", SetKeyRequest, err)
	}
}

func TestSetKeysAcceptsEachKey(t *testing.T) {
	var got [][]string
	ts := startServer(t, func(c *Config) {
		c.OnSetKey = func(ks []ssh.PublicKey) error {
			var prints []string
			for _, k := range ks {
				prints = append(prints, ssh.FingerprintSHA256(k))
			}
			got = append(got, prints)
			return nil
		}
	})
	lease, access := newSigner(t), newSigner(t)
	ok, _, err := ts.client(t).SendRequest(SetKeysRequest, true, MarshalKeys(lease.PublicKey(), access.PublicKey()))
	if err != nil || !ok {
		t.Fatalf("set-keys request = %v, %v; want accepted", ok, err)
	}
	if !ts.canLogIn(t, lease) || !ts.canLogIn(t, access) {
		t.Error("a key set is refused")
	}
	if ts.canLogIn(t, ts.clientKey) {
		t.Error("the old key still logs in")
	}
	want := [][]string{{ssh.FingerprintSHA256(lease.PublicKey()), ssh.FingerprintSHA256(access.PublicKey())}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("OnSetKey calls (-want +got):\n%s", diff)
	}
}

func TestAlsoAuthorizedKeysLogIn(t *testing.T) {
	access := newSigner(t)
	ts := startServer(t, func(c *Config) { c.AlsoAuthorized = []ssh.PublicKey{access.PublicKey()} })
	if !ts.canLogIn(t, ts.clientKey) || !ts.canLogIn(t, access) {
		t.Error("a configured key is refused")
	}
	if ts.canLogIn(t, newSigner(t)) {
		t.Error("another key logs in")
	}
}

func TestSetKeysRefusalsChangeNothing(t *testing.T) {
	next := newSigner(t)
	key := next.PublicKey()
	many := make([]ssh.PublicKey, MaxSetKeys+1)
	for i := range many {
		many[i] = key
	}
	tests := []struct {
		name    string
		payload []byte
	}{
		{"empty payload", nil},
		{"truncated length", []byte{0, 0}},
		{"length beyond the payload", append([]byte{0, 0, 1, 0}, key.Marshal()...)},
		{"a malformed key after a good one", append(MarshalKeys(key), 0, 0, 0, 3, 'a', 'b', 'c')},
		{"too many keys", MarshalKeys(many...)},
		{"bare key without a length", key.Marshal()},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ts := startServer(t, nil)
			ok, _, err := ts.client(t).SendRequest(SetKeysRequest, true, tt.payload)
			if err != nil {
				t.Fatal(err)
			}
			if ok {
				t.Error("set-keys request accepted, want refused")
			}
			if !ts.canLogIn(t, ts.clientKey) || ts.canLogIn(t, next) {
				t.Error("the keys changed")
			}
		})
	}
}

// TestSetKeyRacesAuthentication runs set-key requests while other
// clients log in (for the race detector): every login succeeds with one
// of the keys, and the last key set is the one accepted.
func TestSetKeyRacesAuthentication(t *testing.T) {
	ts := startServer(t, nil)
	c := ts.client(t)
	keys := []ssh.Signer{ts.clientKey, newSigner(t), newSigner(t)}
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			cfg := &ssh.ClientConfig{
				User: "crabbox", Auth: []ssh.AuthMethod{ssh.PublicKeys(keys...)},
				HostKeyCallback: ssh.FixedHostKey(ts.hostKey),
			}
			cl, err := ssh.Dial("tcp", ts.addr, cfg)
			if err != nil {
				t.Errorf("dial with all keys: %v", err)
				return
			}
			_ = cl.Close()
		})
	}
	for _, k := range keys[1:] {
		if ok, _, err := c.SendRequest(SetKeyRequest, true, k.PublicKey().Marshal()); err != nil || !ok {
			t.Fatalf("set-key = %v, %v", ok, err)
		}
	}
	wg.Wait()
	if !ts.canLogIn(t, keys[2]) || ts.canLogIn(t, keys[1]) {
		t.Error("the last key set is not the only one accepted")
	}
}
