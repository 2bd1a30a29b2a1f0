package coordinator

import (
	"net/http"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/crabbox-dev/crabbox/coordinator/api"
)

// FuzzLeaseRequest feeds arbitrary bodies to the lease request parser: it
// never panics, and whatever it accepts is normalised within the limits.
func FuzzLeaseRequest(f *testing.F) {
	f.Add(`{"sshPublicKey":"ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIDuXyOwzt2Mk9SRhU2Q8Ar2c6gfKt6cZWPFoYbgmXz4E","ttlSeconds":99999,"labels":{"a":"b"}}`)
	f.Add(`{"leaseID":"cbx_0123456789ab","sshPort":"22","sshFallbackPorts":["2222"],"target":"macos"}`)
	f.Add(`{"ttlSeconds":-1}`)
	f.Add(`[]`)
	f.Add(`{"labels":{"k":1}}`)
	s := &Server{defProv: "fake"}
	f.Fuzz(func(t *testing.T, body string) {
		var req api.LeaseRequest
		if e := decodeJSON([]byte(body), &req); e != nil {
			if e.status != http.StatusBadRequest || e.code != api.CodeInvalidRequest {
				t.Fatalf("decode error %d %s", e.status, e.code)
			}
			return
		}
		spec, e := s.normalizeLeaseRequest(req)
		if e != nil {
			if e.status != http.StatusBadRequest {
				t.Fatalf("normalize error %d %s", e.status, e.code)
			}
			return
		}
		if spec.TTLSeconds < 1 || spec.TTLSeconds > api.MaxLeaseSeconds || spec.IdleSeconds < 1 || spec.IdleSeconds > api.MaxLeaseSeconds {
			t.Fatalf("durations out of range: %+v", spec)
		}
		if spec.SSHPublicKey == "" || spec.Provider == "" || spec.Target == "" || !validPort(spec.SSHPort) {
			t.Fatalf("accepted incomplete spec %+v", spec)
		}
		if first, again := spec.hash(), spec.hash(); first != again {
			t.Fatal("hash is not deterministic")
		}
	})
}

// FuzzShareRequest: a PUT share body is refused with 400 or becomes a
// share whose every user is normalized, printable and bounded, with a
// valid role, that normalizes to itself.
func FuzzShareRequest(f *testing.F) {
	f.Add(`{"users":{"Bob":"use","carol":"manage"},"org":"read"}`)
	f.Add(`{"users":{" ":"use"}}`)
	f.Add(`{"users":{"bob":"admin"}}`)
	f.Add(`{"org":"owner"}`)
	f.Add(`{"users":{"a\u0000b":"read"}}`)
	f.Add(`{"users":["bob"]}`)
	f.Fuzz(func(t *testing.T, body string) {
		var req api.LeaseShare
		if e := decodeJSON([]byte(body), &req); e != nil {
			if e.status != http.StatusBadRequest {
				t.Fatalf("decode error %d %s", e.status, e.code)
			}
			return
		}
		got, e := shareField(req)
		if e != nil {
			if e.status != http.StatusBadRequest || e.code != api.CodeInvalidRequest {
				t.Fatalf("share error %d %s", e.status, e.code)
			}
			return
		}
		if len(got.Users) > api.MaxShareUsers || (got.Org != "" && !got.Org.Valid()) {
			t.Fatalf("share out of bounds: %+v", got)
		}
		for u, r := range got.Users {
			if u == "" || u != api.NormalizeShareUser(u) || !r.Valid() || textField("user", u, 200) != nil {
				t.Fatalf("user %q role %q", u, r)
			}
		}
		again, err := got.Normalize()
		if err != nil || !cmp.Equal(got, again) {
			t.Fatalf("normalizing again: %+v, %v; was %+v", again, err, got)
		}
	})
}
