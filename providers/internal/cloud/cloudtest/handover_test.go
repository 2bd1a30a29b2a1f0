package cloudtest_test

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/crabbox-dev/crabbox/internal/handover"
	"github.com/crabbox-dev/crabbox/lease"
	"github.com/crabbox-dev/crabbox/providers/internal/cloud"
	"github.com/crabbox-dev/crabbox/providers/internal/cloud/cloudtest"
)

// TestHandover: a fake cloud box made for a ready pool (its user data
// authorizes the pool key) is handed to a new owner as on a real cloud:
// the pool key logs in, the box is fresh, and after SetKey only the
// owner's key opens it.
func TestHandover(t *testing.T) {
	id := lease.NewID()
	poolKey, err := handover.PoolKey(bytes.Repeat([]byte{7}, 32), id)
	if err != nil {
		t.Fatal(err)
	}
	hk, err := cloud.NewHostKey()
	if err != nil {
		t.Fatal(err)
	}
	root := filepath.Join(t.TempDir(), "work")
	ud, err := cloud.Bootstrap{
		AuthorizedKey: strings.TrimSpace(string(ssh.MarshalAuthorizedKey(poolKey.PublicKey()))),
		HostKey:       hk, SelfDestructAfter: time.Hour, WorkRoot: root, Ports: []int{2222},
	}.UserData()
	if err != nil {
		t.Fatal(err)
	}
	box, err := cloudtest.StartBox(ud, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := box.Close(); err != nil {
			t.Errorf("close the box: %v", err)
		}
	})
	target := handover.Box{Host: box.Host, Ports: []int{box.Port}, User: cloud.DefaultUser, HostKey: hk.AuthorizedKey()}
	c, _, err := handover.Dial(t.Context(), target, poolKey)
	if err != nil {
		t.Fatalf("Dial with the pool key: %v", err)
	}
	defer c.Close()
	if err := handover.Fresh(t.Context(), c, root); err != nil {
		t.Fatalf("Fresh(new box) = %v", err)
	}
	owner, err := lease.NewKey()
	if err != nil {
		t.Fatal(err)
	}
	if err := handover.SetKey(t.Context(), c, owner.Signer.PublicKey()); err != nil {
		t.Fatalf("SetKey: %v", err)
	}
	if oc, _, err := handover.Dial(t.Context(), target, poolKey); err == nil {
		oc.Close()
		t.Error("the pool key still opens the box")
	}
	oc, _, err := handover.Dial(t.Context(), target, owner.Signer)
	if err != nil {
		t.Fatalf("Dial with the owner's key: %v", err)
	}
	oc.Close()

	// A box its owner used is not fresh.
	if err := os.Mkdir(filepath.Join(root, id), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := handover.Fresh(t.Context(), c, root); !errors.Is(err, handover.ErrUsed) {
		t.Errorf("Fresh(used box) = %v, want ErrUsed", err)
	}
}
