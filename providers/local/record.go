package local

import (
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/crabbox-dev/crabbox/lease"

	"github.com/crabbox-dev/crabbox/internal/atomicfile"

	"golang.org/x/crypto/ssh"

	"github.com/crabbox-dev/crabbox/provider"
)

// The files of a lease directory <Root>/<leaseID>/.
const (
	recordFile  = "lease.json"
	hostKeyFile = "host_key"
	workDir     = "work"
	agentLog    = "agent.log"
)

// loopback is the only address boxes listen on.
const loopback = "127.0.0.1"

// record is the provider's own description of a lease, kept in
// <dir>/lease.json. It holds no secret: the host's private key is in
// host_key, and the lease key's private half never reaches the provider.
type record struct {
	ID        string            `json:"id"`
	Slug      string            `json:"slug,omitempty"`
	CreatedAt time.Time         `json:"createdAt"`
	ExpiresAt time.Time         `json:"expiresAt"`
	Labels    map[string]string `json:"labels,omitempty"`
	User      string            `json:"user"`
	// Port is the loopback port the box serves SSH on; 0 until it serves.
	Port int `json:"port,omitempty"`
	// HostKey is the box's public host key, authorized_keys form.
	HostKey string `json:"hostKey"`
	// AuthorizedKey is the lease key, the only key the box accepts: the
	// key of the acquire, or the one a ready pool's handover set since
	// (sshserver.SetKeyRequest).
	AuthorizedKey string `json:"authorizedKey"`
	// AlsoAuthorized are the other keys the box accepts (authorized_keys
	// form): a coordinator's access key the lease's owner installed with
	// sshserver.SetKeysRequest.
	AlsoAuthorized []string `json:"alsoAuthorized,omitempty"`
	// PID is the agent process serving the box out of process; 0 when the
	// box is served in-process by the program that acquired it.
	PID int `json:"pid,omitempty"`
}

// target is how the library reaches the box the record describes.
func (r record) target(dir string) provider.LeaseTarget {
	return provider.LeaseTarget{
		LeaseID:   r.ID,
		Slug:      r.Slug,
		Provider:  Name,
		Host:      loopback,
		Port:      r.Port,
		User:      r.User,
		HostKey:   r.HostKey,
		WorkRoot:  filepath.Join(dir, workDir),
		State:     "ready",
		Labels:    maps.Clone(r.Labels),
		CreatedAt: r.CreatedAt,
		ExpiresAt: r.ExpiresAt,
	}
}

// checkLeaseID accepts only crabbox lease IDs, which are safe directory
// names under the root (one path element, no separators, no dots).
func checkLeaseID(id string) error {
	if !lease.IsID(id) {
		return fmt.Errorf("lease ID %q is malformed: want cbx_ and 12 lowercase hex digits", id)
	}
	return nil
}

func readRecord(dir string) (record, error) {
	b, err := os.ReadFile(filepath.Join(dir, recordFile))
	if err != nil {
		return record{}, err
	}
	var r record
	if err := json.Unmarshal(b, &r); err != nil {
		return record{}, fmt.Errorf("parse %s: %w", filepath.Join(dir, recordFile), err)
	}
	if r.ID != filepath.Base(dir) {
		return record{}, fmt.Errorf("%s describes lease %q, not %q", filepath.Join(dir, recordFile), r.ID, filepath.Base(dir))
	}
	return r, nil
}

// writeRecord replaces <dir>/lease.json atomically, so that a reader in any
// process sees the old or the new record, never a part of one.
func writeRecord(dir string, r record) error {
	b, err := encodeRecord(r)
	if err != nil {
		return err
	}
	return atomicfile.Write(filepath.Join(dir, recordFile), b)
}

// updateRecord rewrites the record in dir with fn applied.
func updateRecord(dir string, fn func(*record)) (record, error) {
	r, err := readRecord(dir)
	if err != nil {
		return record{}, err
	}
	fn(&r)
	return r, writeRecord(dir, r)
}

// newHostKey makes the box's ed25519 host key, writes its private half to
// <dir>/host_key (0600) and returns the public half in authorized_keys form.
func newHostKey(dir string) (string, error) {
	private, public, err := NewHostKey()
	if err != nil {
		return "", err
	}
	if err := atomicfile.Write(filepath.Join(dir, hostKeyFile), private); err != nil {
		return "", err
	}
	return public, nil
}

func loadHostKey(dir string) (ssh.Signer, error) {
	b, err := os.ReadFile(filepath.Join(dir, hostKeyFile))
	if err != nil {
		return nil, err
	}
	return ssh.ParsePrivateKey(b)
}

func formatPublicKey(k ssh.PublicKey) string {
	return strings.TrimSpace(string(ssh.MarshalAuthorizedKey(k)))
}

func parsePublicKey(line string) (ssh.PublicKey, error) {
	k, _, _, _, err := ssh.ParseAuthorizedKey([]byte(line))
	return k, err
}
