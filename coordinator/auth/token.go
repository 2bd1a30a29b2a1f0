// Package auth authenticates requests to the crabbox coordinator.
//
// Three kinds of bearer token are accepted, checked in this order with
// constant-time comparisons: the admin token, the shared operator token, and
// signed user tokens ("cbxu_" + base64url(payload) + "." +
// base64url(HMAC-SHA256(secret, base64url(payload)))). MintUserToken issues
// user tokens (the CLI's `crabbox coordinator token issue` calls it);
// ParseUserToken verifies them. Secrets are values the caller reads from the
// environment or files; they never appear in errors.
package auth

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"
)

// UserTokenPrefix starts every signed user token.
const UserTokenPrefix = "cbxu_"

// MinSecretLen is the shortest accepted session secret, in bytes.
const MinSecretLen = 32

// MaxClockSkew is how far in the future a token's issue time may lie.
const MaxClockSkew = 60 * time.Second

const (
	tokenType    = "crabbox-user"
	tokenVersion = 3
	// maxTokenLen bounds the work done on a token from outside.
	maxTokenLen = 4096
)

// Claims are what a signed user token asserts.
type Claims struct {
	// ID is the token's unique ID (jti), a version 4 UUID. MintUserToken
	// generates one when it is empty.
	ID    string
	Owner string
	Org   string
	// Login is the user's login name at the identity provider, if any.
	Login     string
	IssuedAt  time.Time
	ExpiresAt time.Time
}

// payload is the token's JSON body. Field order is the wire order.
type payload struct {
	Typ     string `json:"typ"`
	Version int    `json:"version"`
	JTI     string `json:"jti"`
	Owner   string `json:"owner"`
	Org     string `json:"org"`
	Login   string `json:"login"`
	IAT     int64  `json:"iat"`
	EXP     int64  `json:"exp"`
}

// ErrInvalidToken is wrapped by every rejection of a user token.
var ErrInvalidToken = errors.New("invalid user token")

var b64 = base64.RawURLEncoding

// CheckSecret reports whether secret is usable as a session secret.
func CheckSecret(secret []byte) error {
	if len(secret) < MinSecretLen {
		return fmt.Errorf("session secret is %d bytes; it must be at least %d", len(secret), MinSecretLen)
	}
	return nil
}

// MintUserToken signs c with secret and returns the token. Times are
// truncated to whole seconds; an empty c.ID gets a fresh version 4 UUID.
func MintUserToken(secret []byte, c Claims) (string, error) {
	if err := CheckSecret(secret); err != nil {
		return "", err
	}
	if c.ID == "" {
		c.ID = uuid.NewString()
	}
	if !isUUIDv4(c.ID) {
		return "", fmt.Errorf("token ID %q is not a version 4 UUID", c.ID)
	}
	if strings.TrimSpace(c.Owner) == "" {
		return "", errors.New("token owner is empty")
	}
	if c.IssuedAt.IsZero() || c.ExpiresAt.IsZero() {
		return "", errors.New("token issue and expiry times are required")
	}
	p := payload{
		Typ: tokenType, Version: tokenVersion, JTI: c.ID,
		Owner: c.Owner, Org: c.Org, Login: c.Login,
		IAT: c.IssuedAt.Unix(), EXP: c.ExpiresAt.Unix(),
	}
	if p.EXP <= p.IAT {
		return "", errors.New("token expiry must be after its issue time")
	}
	body, err := json.Marshal(p)
	if err != nil {
		return "", fmt.Errorf("encode token: %w", err)
	}
	encoded := b64.EncodeToString(body)
	return UserTokenPrefix + encoded + "." + b64.EncodeToString(sign(secret, encoded)), nil
}

// ParseUserToken verifies token with secret at time now and returns its
// claims. Every rejection wraps ErrInvalidToken and says why without
// repeating the token.
func ParseUserToken(secret []byte, token string, now time.Time) (Claims, error) {
	c, err := parseUserToken(secret, token, now)
	if err != nil {
		return Claims{}, fmt.Errorf("%w: %s", ErrInvalidToken, err)
	}
	return c, nil
}

func parseUserToken(secret []byte, token string, now time.Time) (Claims, error) {
	if len(secret) < MinSecretLen {
		return Claims{}, errors.New("no usable session secret configured")
	}
	if len(token) > maxTokenLen {
		return Claims{}, errors.New("token too long")
	}
	rest, ok := strings.CutPrefix(token, UserTokenPrefix)
	if !ok {
		return Claims{}, errors.New("missing " + UserTokenPrefix + " prefix")
	}
	encoded, sig, ok := strings.Cut(rest, ".")
	if !ok || strings.Contains(sig, ".") {
		return Claims{}, errors.New("want payload.signature")
	}
	gotSig, err := b64.DecodeString(sig)
	if err != nil {
		return Claims{}, errors.New("signature is not unpadded base64url")
	}
	if !hmac.Equal(gotSig, sign(secret, encoded)) {
		return Claims{}, errors.New("bad signature")
	}
	body, err := b64.DecodeString(encoded)
	if err != nil {
		return Claims{}, errors.New("payload is not unpadded base64url")
	}
	p, err := decodePayload(body)
	if err != nil {
		return Claims{}, err
	}
	switch {
	case p.Typ != tokenType:
		return Claims{}, fmt.Errorf("type %q, want %q", p.Typ, tokenType)
	case p.Version != tokenVersion:
		return Claims{}, fmt.Errorf("version %d, want %d", p.Version, tokenVersion)
	case !isUUIDv4(p.JTI):
		return Claims{}, errors.New("jti is not a version 4 UUID")
	case strings.TrimSpace(p.Owner) == "":
		return Claims{}, errors.New("owner is empty")
	case p.EXP <= p.IAT:
		return Claims{}, errors.New("expiry is not after issue time")
	case p.EXP <= now.Unix():
		return Claims{}, errors.New("expired")
	case p.IAT > now.Add(MaxClockSkew).Unix():
		return Claims{}, errors.New("issued in the future")
	}
	return Claims{
		ID: p.JTI, Owner: p.Owner, Org: p.Org, Login: p.Login,
		IssuedAt: time.Unix(p.IAT, 0).UTC(), ExpiresAt: time.Unix(p.EXP, 0).UTC(),
	}, nil
}

// decodePayload decodes a token body: a JSON object without an "admin" key
// whose known fields have the right types. Other keys are ignored.
func decodePayload(body []byte) (payload, error) {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(body, &fields); err != nil {
		return payload{}, errors.New("payload is not a JSON object")
	}
	for k := range fields {
		if strings.EqualFold(k, "admin") {
			return payload{}, errors.New("payload must not carry an admin claim")
		}
	}
	var p payload
	if err := json.Unmarshal(body, &p); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			return payload{}, fmt.Errorf("payload field %q has the wrong type", te.Field)
		}
		return payload{}, errors.New("payload is malformed")
	}
	return p, nil
}

func sign(secret []byte, encoded string) []byte {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte(encoded))
	return m.Sum(nil)
}

// isUUIDv4 reports whether s is a canonical (36-character, hyphenated)
// RFC 4122 version 4 UUID.
func isUUIDv4(s string) bool {
	if len(s) != 36 {
		return false
	}
	u, err := uuid.Parse(s)
	return err == nil && u.Version() == 4 && u.Variant() == uuid.RFC4122
}
