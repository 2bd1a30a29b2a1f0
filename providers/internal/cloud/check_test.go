package cloud_test

import (
	"strings"
	"testing"
	"time"

	"github.com/crabbox-dev/crabbox/lease"
	"github.com/crabbox-dev/crabbox/providers/internal/cloud"
)

func TestCheckEndpoint(t *testing.T) {
	for _, ok := range []string{"https://api.example.test", "http://127.0.0.1:8080", "https://proxy.test/scaleway"} {
		if err := cloud.CheckEndpoint(ok); err != nil {
			t.Errorf("CheckEndpoint(%q) = %v, want nil", ok, err)
		}
	}
	for _, bad := range []string{"", "api.example.test", "ftp://api.example.test", "https://", "://x"} {
		if err := cloud.CheckEndpoint(bad); err == nil || !strings.Contains(err.Error(), "is not an http or https URL") {
			t.Errorf("CheckEndpoint(%q) = %v, want an error naming it", bad, err)
		}
	}
}

func TestCheckBootstrap(t *testing.T) {
	if err := cloud.CheckBootstrap("/work/crabbox", []int{2222, 22}, false); err != nil {
		t.Errorf("CheckBootstrap of the defaults: %v", err)
	}
	if err := cloud.CheckBootstrap("work", nil, false); err == nil || !strings.Contains(err.Error(), `work root "work"`) {
		t.Errorf("CheckBootstrap of a relative work root: %v", err)
	}
	if err := cloud.CheckBootstrap("/work", []int{70000}, false); err == nil || !strings.Contains(err.Error(), "port 70000") {
		t.Errorf("CheckBootstrap of a bad port: %v", err)
	}
}

func TestCheckRequest(t *testing.T) {
	key, err := lease.NewKey()
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	good := acquireRequest()
	good.PublicKey, good.ExpiresAt = key.AuthorizedKey(), now.Add(time.Hour)
	if err := cloud.CheckRequest(good, now); err != nil {
		t.Fatalf("CheckRequest of a good request: %v", err)
	}
	badID, badKey, expired := good, good, good
	badID.LeaseID = "web-1"
	badKey.PublicKey = "ssh-ed25519 nonsense"
	expired.ExpiresAt = now
	for _, tt := range []struct {
		name string
		err  error
		want string
	}{
		{"lease ID", cloud.CheckRequest(badID, now), `lease ID "web-1"`},
		{"public key", cloud.CheckRequest(badKey, now), "lease public key"},
		{"expiry", cloud.CheckRequest(expired, now), "is not after now"},
	} {
		if tt.err == nil || !strings.Contains(tt.err.Error(), tt.want) {
			t.Errorf("%s: CheckRequest = %v, want an error containing %q", tt.name, tt.err, tt.want)
		}
	}
}
