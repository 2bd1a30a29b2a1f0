package coordinator

import (
	"net/http"
	"testing"

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
