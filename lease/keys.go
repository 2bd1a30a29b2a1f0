package lease

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/pem"
	"fmt"
	"strings"

	"golang.org/x/crypto/ssh"
)

// Key is a lease's SSH key pair, made in-process.
type Key struct {
	Signer ssh.Signer
	// PEM is the private key in OpenSSH PEM form; it is a secret.
	PEM []byte
}

// NewKey makes an ed25519 key pair.
func NewKey() (Key, error) {
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return Key{}, fmt.Errorf("generate lease key: %w", err)
	}
	block, err := ssh.MarshalPrivateKey(priv, "crabbox lease key")
	if err != nil {
		return Key{}, fmt.Errorf("encode lease key: %w", err)
	}
	signer, err := ssh.NewSignerFromKey(priv)
	if err != nil {
		return Key{}, fmt.Errorf("lease key signer: %w", err)
	}
	return Key{Signer: signer, PEM: pem.EncodeToMemory(block)}, nil
}

// ParseKey reads a private key in PEM form.
func ParseKey(pemBytes []byte) (Key, error) {
	signer, err := ssh.ParsePrivateKey(pemBytes)
	if err != nil {
		return Key{}, fmt.Errorf("parse private key: %w", err)
	}
	return Key{Signer: signer, PEM: pemBytes}, nil
}

// AuthorizedKey returns the public key as one authorized_keys line.
func (k Key) AuthorizedKey() string {
	return strings.TrimSpace(string(ssh.MarshalAuthorizedKey(k.Signer.PublicKey())))
}

// FormatPublicKey renders a public key as an authorized_keys line.
func FormatPublicKey(k ssh.PublicKey) string {
	return strings.TrimSpace(string(ssh.MarshalAuthorizedKey(k)))
}

// ParsePublicKey parses an authorized_keys line.
func ParsePublicKey(line string) (ssh.PublicKey, error) {
	k, _, _, _, err := ssh.ParseAuthorizedKey([]byte(line))
	if err != nil {
		return nil, fmt.Errorf("parse public key %q: %w", line, err)
	}
	return k, nil
}
