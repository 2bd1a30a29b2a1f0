package sshserver

import (
	"crypto/subtle"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"

	"golang.org/x/crypto/ssh"
)

// serverVersion is the identification string the server sends.
const serverVersion = "SSH-2.0-crabbox"

// newSSHConfig returns the server side of the SSH handshake: the host key
// and public-key authentication against the authorized keys (and
// Config.User, if set). No other authentication method is offered.
func (s *Server) newSSHConfig() *ssh.ServerConfig {
	c := &ssh.ServerConfig{
		ServerVersion:     serverVersion,
		PublicKeyCallback: s.checkPublicKey,
		AuthLogCallback: func(meta ssh.ConnMetadata, method string, err error) {
			if err != nil && method != "none" {
				s.log.Debug("authentication failed", "remote", meta.RemoteAddr().String(), "user", meta.User(), "method", method, "err", err)
			}
		},
	}
	if banner := s.cfg.Banner; banner != "" {
		c.BannerCallback = func(ssh.ConnMetadata) string { return banner }
	}
	c.AddHostKey(s.cfg.HostKey)
	return c
}

// checkPublicKey accepts only an authorized key, for the configured user.
// x/crypto/ssh verifies the client's signature after this returns.
func (s *Server) checkPublicKey(meta ssh.ConnMetadata, key ssh.PublicKey) (*ssh.Permissions, error) {
	if s.cfg.User != "" && meta.User() != s.cfg.User {
		return nil, fmt.Errorf("user %q is not allowed", meta.User())
	}
	wire, found := key.Marshal(), 0
	for _, k := range *s.authorized.Load() {
		found |= subtle.ConstantTimeCompare(wire, k)
	}
	if found != 1 {
		return nil, errors.New("public key is not authorized")
	}
	return &ssh.Permissions{}, nil
}

// MarshalKeys is the payload of a SetKeysRequest for keys: each key's
// wire form as an SSH string (a 32-bit big-endian length, then the
// bytes), in order.
func MarshalKeys(keys ...ssh.PublicKey) []byte {
	var out []byte
	for _, k := range keys {
		w := k.Marshal()
		out = binary.BigEndian.AppendUint32(out, uint32(len(w)))
		out = append(out, w...)
	}
	return out
}

// parseKeys reads the payload of a request of type typ: one key in wire
// form for a SetKeyRequest, 1 to MaxSetKeys SSH strings of keys for a
// SetKeysRequest. Certificates are not keys.
func parseKeys(typ string, payload []byte) ([]ssh.PublicKey, error) {
	var wires [][]byte
	if typ == SetKeyRequest {
		wires = [][]byte{payload}
	} else {
		for len(payload) > 0 {
			if len(wires) == MaxSetKeys {
				return nil, fmt.Errorf("more than %d keys", MaxSetKeys)
			}
			if len(payload) < 4 {
				return nil, errors.New("truncated key list")
			}
			n := binary.BigEndian.Uint32(payload)
			if uint64(n) > uint64(len(payload)-4) {
				return nil, errors.New("truncated key list")
			}
			wires = append(wires, payload[4:4+n])
			payload = payload[4+n:]
		}
		if len(wires) == 0 {
			return nil, errors.New("no key")
		}
	}
	keys := make([]ssh.PublicKey, 0, len(wires))
	for i, w := range wires {
		k, err := ssh.ParsePublicKey(w)
		if err != nil {
			return nil, fmt.Errorf("key %d: malformed: %w", i+1, err)
		}
		if _, isCert := k.(*ssh.Certificate); isCert {
			return nil, fmt.Errorf("key %d: a certificate is not a key", i+1)
		}
		keys = append(keys, k)
	}
	return keys, nil
}

// setKeys answers a SetKeyRequest or SetKeysRequest (typ), which only an
// authenticated connection can send: the keys in payload become the only
// keys accepted from new connections, once Config.OnSetKey (if set)
// accepted them. It reports whether the keys were replaced; a malformed
// payload or a refusal changes nothing.
func (s *Server) setKeys(typ string, payload []byte, log *slog.Logger) bool {
	keys, err := parseKeys(typ, payload)
	if err != nil {
		log.Warn("refused to set the authorized keys", "err", err)
		return false
	}
	prints := make([]string, len(keys))
	wires := make([][]byte, len(keys))
	for i, k := range keys {
		prints[i], wires[i] = ssh.FingerprintSHA256(k), k.Marshal()
	}
	s.setKeyMu.Lock()
	defer s.setKeyMu.Unlock()
	if s.cfg.OnSetKey != nil {
		if err := s.cfg.OnSetKey(keys); err != nil {
			log.Warn("refused to set the authorized keys", "fingerprints", prints, "err", err)
			return false
		}
	}
	s.authorized.Store(&wires)
	log.Info("authorized keys replaced", "fingerprints", prints)
	return true
}
