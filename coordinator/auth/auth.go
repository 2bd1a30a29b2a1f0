package auth

import (
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"time"
)

// Headers an admin may use to act for an owner and org.
const (
	OwnerHeader = "X-Crabbox-Owner"
	OrgHeader   = "X-Crabbox-Org"
)

// UnknownOwner is an admin request's owner when it names none.
const UnknownOwner = "unknown"

// Config holds the coordinator's secrets and identity settings. The caller
// reads secrets from the environment or files, never from flags.
type Config struct {
	// AdminToken grants admin (CRABBOX_ADMIN_TOKEN). Empty disables it.
	AdminToken string
	// SharedToken is the shared operator token (CRABBOX_SHARED_TOKEN).
	// Empty disables it.
	SharedToken string
	// SharedOwner is the owner of requests made with the shared token.
	SharedOwner string
	// SessionSecret signs user tokens (CRABBOX_SESSION_SECRET). Empty
	// disables user tokens; otherwise it must be at least MinSecretLen
	// bytes and differ from SharedToken.
	SessionSecret string
	// AdminOwners lists user-token owners who are admins.
	AdminOwners []string
	// DefaultOrg is the org of requests that name none.
	DefaultOrg string
}

// Validate reports a configuration that would weaken authentication.
func (c Config) Validate() error {
	if c.AdminToken == "" && c.SharedToken == "" && c.SessionSecret == "" {
		return errors.New("no credentials configured: set an admin token, a shared token or a session secret")
	}
	if c.SessionSecret != "" {
		if err := CheckSecret([]byte(c.SessionSecret)); err != nil {
			return err
		}
		if c.SessionSecret == c.SharedToken {
			return errors.New("session secret must differ from the shared token")
		}
	}
	if c.SharedToken != "" && c.SharedToken == c.AdminToken {
		return errors.New("shared token must differ from the admin token")
	}
	if c.SharedToken != "" && strings.TrimSpace(c.SharedOwner) == "" {
		return errors.New("shared token configured without a shared owner")
	}
	if strings.TrimSpace(c.DefaultOrg) == "" {
		return errors.New("default org is empty")
	}
	return nil
}

// Method says how a request authenticated (the whoami "auth" field).
const MethodBearer = "bearer"

// Identity is who a request acts as.
type Identity struct {
	Owner string
	Org   string
	Login string
	Admin bool
	// Method is how the request authenticated: MethodBearer.
	Method string
	// TokenExpiresAt is a user token's expiry; zero for static tokens.
	TokenExpiresAt time.Time
	// TokenID is a user token's ID (its jti); empty for static tokens.
	TokenID string
}

// Authenticator checks bearer tokens against a Config.
type Authenticator struct {
	cfg       Config
	admin     [sha256.Size]byte
	shared    [sha256.Size]byte
	secret    []byte
	adminUser []string
}

// New returns an Authenticator for cfg after validating it.
func New(cfg Config) (*Authenticator, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("auth config: %w", err)
	}
	a := &Authenticator{cfg: cfg, adminUser: slices.Clone(cfg.AdminOwners)}
	if cfg.AdminToken != "" {
		a.admin = sha256.Sum256([]byte(cfg.AdminToken))
	}
	if cfg.SharedToken != "" {
		a.shared = sha256.Sum256([]byte(cfg.SharedToken))
	}
	if cfg.SessionSecret != "" {
		a.secret = []byte(cfg.SessionSecret)
	}
	return a, nil
}

// ErrUnauthenticated is wrapped by every authentication failure.
var ErrUnauthenticated = errors.New("unauthenticated")

// headerValue bounds the owner and org an admin may name.
var headerValue = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.@+-]{0,127}$`)

// Authenticate returns the identity of r's bearer token at time now.
func (a *Authenticator) Authenticate(r *http.Request, now time.Time) (Identity, error) {
	scheme, token, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return Identity{}, fmt.Errorf("%w: missing bearer token", ErrUnauthenticated)
	}
	token = strings.TrimSpace(token)
	if token == "" {
		return Identity{}, fmt.Errorf("%w: empty bearer token", ErrUnauthenticated)
	}
	sum := sha256.Sum256([]byte(token))
	if a.cfg.AdminToken != "" && subtle.ConstantTimeCompare(sum[:], a.admin[:]) == 1 {
		return a.adminIdentity(r)
	}
	if a.cfg.SharedToken != "" && subtle.ConstantTimeCompare(sum[:], a.shared[:]) == 1 {
		return Identity{Owner: a.cfg.SharedOwner, Org: a.cfg.DefaultOrg, Method: MethodBearer}, nil
	}
	if a.secret != nil && strings.HasPrefix(token, UserTokenPrefix) {
		c, err := ParseUserToken(a.secret, token, now)
		if err != nil {
			return Identity{}, fmt.Errorf("%w: %w", ErrUnauthenticated, err)
		}
		org := c.Org
		if org == "" {
			org = a.cfg.DefaultOrg
		}
		return Identity{
			Owner: c.Owner, Org: org, Login: c.Login,
			Admin:  slices.Contains(a.adminUser, c.Owner),
			Method: MethodBearer, TokenExpiresAt: c.ExpiresAt, TokenID: c.ID,
		}, nil
	}
	return Identity{}, fmt.Errorf("%w: unknown token", ErrUnauthenticated)
}

func (a *Authenticator) adminIdentity(r *http.Request) (Identity, error) {
	id := Identity{Owner: UnknownOwner, Org: a.cfg.DefaultOrg, Admin: true, Method: MethodBearer}
	if v := strings.TrimSpace(r.Header.Get(OwnerHeader)); v != "" {
		if !headerValue.MatchString(v) {
			return Identity{}, fmt.Errorf("%w: header %s is malformed", ErrInvalidHeader, OwnerHeader)
		}
		id.Owner = v
	}
	if v := strings.TrimSpace(r.Header.Get(OrgHeader)); v != "" {
		if !headerValue.MatchString(v) {
			return Identity{}, fmt.Errorf("%w: header %s is malformed", ErrInvalidHeader, OrgHeader)
		}
		id.Org = v
	}
	return id, nil
}

// ErrInvalidHeader is returned for an authenticated request whose identity
// headers are malformed (a 400, not a 401).
var ErrInvalidHeader = errors.New("invalid identity header")
