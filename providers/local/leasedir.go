package local

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"maps"
	"time"

	"golang.org/x/crypto/ssh"
)

// The files of a lease directory, for programs that prepare one somewhere
// else for `crabbox agent --lease-dir DIR` to serve (the docker provider
// does so inside a container).
const (
	// RecordFile holds the lease's record (see AgentLease).
	RecordFile = recordFile
	// HostKeyFile holds the box's private host key in OpenSSH PEM form,
	// mode 0600.
	HostKeyFile = hostKeyFile
	// WorkDir is the directory commands start in: the lease's work root.
	WorkDir = workDir
)

// AgentLease is what the record of a lease directory says about a box.
type AgentLease struct {
	ID        string
	Slug      string
	CreatedAt time.Time
	// ExpiresAt is when the agent stops serving the box and removes the
	// lease directory. The agent re-reads it from the record when it
	// passes, so rewriting the record moves it.
	ExpiresAt time.Time
	Labels    map[string]string
	// User is the only SSH user name the box accepts.
	User string
	// HostKey is the box's public host key, authorized_keys form.
	HostKey string
	// AuthorizedKey is the lease key, the only key the box accepts.
	AuthorizedKey string
}

// EncodeRecord returns the content of RecordFile for a new lease
// directory describing l.
func EncodeRecord(l AgentLease) ([]byte, error) {
	if err := checkLeaseID(l.ID); err != nil {
		return nil, err
	}
	if _, err := parsePublicKey(l.HostKey); err != nil {
		return nil, fmt.Errorf("host key: %w", err)
	}
	if _, err := parsePublicKey(l.AuthorizedKey); err != nil {
		return nil, fmt.Errorf("lease public key: %w", err)
	}
	return encodeRecord(record{
		ID: l.ID, Slug: l.Slug, CreatedAt: l.CreatedAt, ExpiresAt: l.ExpiresAt,
		Labels: maps.Clone(l.Labels), User: l.User, HostKey: l.HostKey, AuthorizedKey: l.AuthorizedKey,
	})
}

// DecodeRecord parses the content of RecordFile.
func DecodeRecord(b []byte) (AgentLease, error) {
	r, err := decodeRecord(b)
	if err != nil {
		return AgentLease{}, err
	}
	return AgentLease{
		ID: r.ID, Slug: r.Slug, CreatedAt: r.CreatedAt, ExpiresAt: r.ExpiresAt,
		Labels: r.Labels, User: r.User, HostKey: r.HostKey, AuthorizedKey: r.AuthorizedKey,
	}, nil
}

// SetRecordExpiry returns the content of RecordFile b with the lease's
// expiry moved to t and everything else, including what the agent wrote
// into it, kept.
func SetRecordExpiry(b []byte, t time.Time) ([]byte, error) {
	r, err := decodeRecord(b)
	if err != nil {
		return nil, err
	}
	r.ExpiresAt = t
	return encodeRecord(r)
}

func encodeRecord(r record) ([]byte, error) {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}

func decodeRecord(b []byte) (record, error) {
	var r record
	if err := json.Unmarshal(b, &r); err != nil {
		return record{}, fmt.Errorf("parse lease record: %w", err)
	}
	if err := checkLeaseID(r.ID); err != nil {
		return record{}, fmt.Errorf("lease record: %w", err)
	}
	return r, nil
}

// NewHostKey makes an ed25519 host key for a box. It returns the content of
// HostKeyFile and the public half in authorized_keys form.
func NewHostKey() (private []byte, public string, err error) {
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, "", err
	}
	block, err := ssh.MarshalPrivateKey(priv, "crabbox box host key")
	if err != nil {
		return nil, "", err
	}
	sshPub, err := ssh.NewPublicKey(pub)
	if err != nil {
		return nil, "", err
	}
	return pem.EncodeToMemory(block), formatPublicKey(sshPub), nil
}
