package sshserver

import (
	"crypto/subtle"
	"errors"
	"fmt"
	"log/slog"

	"golang.org/x/crypto/ssh"
)

// serverVersion is the identification string the server sends.
const serverVersion = "SSH-2.0-crabbox"

// newSSHConfig returns the server side of the SSH handshake: the host key
// and public-key authentication against Config.AuthorizedKey (and
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

// checkPublicKey accepts only the authorized key, for the configured user.
// x/crypto/ssh verifies the client's signature after this returns.
func (s *Server) checkPublicKey(meta ssh.ConnMetadata, key ssh.PublicKey) (*ssh.Permissions, error) {
	if s.cfg.User != "" && meta.User() != s.cfg.User {
		return nil, fmt.Errorf("user %q is not allowed", meta.User())
	}
	if subtle.ConstantTimeCompare(key.Marshal(), *s.authorized.Load()) != 1 {
		return nil, errors.New("public key is not authorized")
	}
	return &ssh.Permissions{}, nil
}

// setKey answers a SetKeyRequest, which only an authenticated connection
// can send: payload, a public key in wire form, becomes the only key
// accepted from new connections, once Config.OnSetKey (if set) accepted
// it. It reports whether the key was replaced; a malformed key or a
// refusal changes nothing.
func (s *Server) setKey(payload []byte, log *slog.Logger) bool {
	key, err := ssh.ParsePublicKey(payload)
	if err != nil {
		log.Warn("refused to set the authorized key: malformed key", "err", err)
		return false
	}
	if _, isCert := key.(*ssh.Certificate); isCert {
		log.Warn("refused to set the authorized key: a certificate is not a key")
		return false
	}
	s.setKeyMu.Lock()
	defer s.setKeyMu.Unlock()
	if s.cfg.OnSetKey != nil {
		if err := s.cfg.OnSetKey(key); err != nil {
			log.Warn("refused to set the authorized key", "fingerprint", ssh.FingerprintSHA256(key), "err", err)
			return false
		}
	}
	wire := key.Marshal()
	s.authorized.Store(&wire)
	log.Info("authorized key replaced", "fingerprint", ssh.FingerprintSHA256(key))
	return true
}
