// Package azuredynamicsessions is crabbox's Azure Container Apps dynamic
// sessions provider: a delegated backend whose leases are sessions of a
// session pool, driven through the pool management endpoint's data-plane
// REST API (azure-rest-api-specs,
// specification/app/data-plane/Microsoft.App.DynamicSessions) with
// net/http and Entra ID tokens from azidentity.
//
// Pool type: the pool must be a code interpreter pool of container type
// Shell. The data-plane API runs code only through POST /executions, and
// only a Shell pool runs that code as a shell script; PythonLTS and
// NodeLTS pools run Python or JavaScript, and custom container pools
// answer with the image's own HTTP API, which the published API does not
// describe. A Shell pool also has the file API (/files), so the library
// syncs checkouts into the session.
//
// A session exists once a request names its identifier; crabbox's
// identifiers are "crabbox-<owner>-<lease ID>". Warmup uploads a lease
// record (.crabbox/lease.json in the session's file area, /mnt/data) that
// holds the slug, labels and the lease's TTL end, which creates the
// session. Run starts the command in the background of the session (its
// own process group where setsid exists), its output and exit status
// going to files of a run directory, and follows it with short
// executions that wait in the session for new output, which is then
// downloaded through the file API: output is streamed, the exit code is
// the command's own (128+N for signal N), and a cancelled run kills the
// command's process group. The API has no exit code, no streaming and no
// signals of its own.
//
// Lifetime: the pool ends a session that no request has reached for its
// cooldown period (300 to 3600 s), whatever crabbox asks; the API cannot
// set or extend a session's end. Warmup therefore refuses a lease whose
// idle timeout is longer than the pool's cooldown (read from the new
// session's expireAt), and every request moves the session's end. A lease
// past its TTL is ended by cleanup. A command running when its session
// ends fails with an error saying so, never with an exit code.
//
// Ownership: List reads the pool's sessions (GET /listSessions, paged)
// and reports only identifiers with crabbox's prefix for this owner whose
// lease record names the same lease. Cleanup deletes a session only when
// the caller also holds a claim for its lease and the lease's TTL has
// passed; it cannot see other owners' sessions.
//
// Credentials: CRABBOX_AZURE_DYNAMIC_SESSIONS_TOKEN when set (a bearer
// token for https://dynamicsessions.io), else azidentity's default chain
// (environment, workload or managed identity, az or azd login); the
// caller needs the Azure ContainerApps Session Executor role on the pool.
// Tokens are never a flag, an argument, logged or in an error.
package azuredynamicsessions

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path"
	"strings"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/azidentity"

	"github.com/crabbox-dev/crabbox/provider"
	"github.com/crabbox-dev/crabbox/providers/azuredynamicsessions/azuredynamicsessionsspec"
	"github.com/crabbox-dev/crabbox/providers/internal/cloud"
	"github.com/crabbox-dev/crabbox/providers/internal/delegated"
)

// Name is the provider's registered name.
const Name = azuredynamicsessionsspec.Name

// Scope is the OAuth scope of the data-plane API's tokens.
const Scope = "https://dynamicsessions.io/.default"

// Defaults.
const (
	DefaultAPIVersion = azuredynamicsessionsspec.DefaultAPIVersion
	DefaultWorkdir    = azuredynamicsessionsspec.DefaultWorkdir
	// DefaultMaxAttempts bounds the tries of one request answered 429 or
	// 5xx (or not answered).
	DefaultMaxAttempts = 5
	// DefaultKillGrace is how long a cancelled command has to end after
	// SIGTERM before its process group gets SIGKILL.
	DefaultKillGrace = 10 * time.Second
)

// FilesDir is the directory of a session that the file API serves.
const FilesDir = "/mnt/data"

// Config is the provider's typed configuration.
type Config struct {
	// Endpoint is the pool management endpoint.
	Endpoint string
	// APIVersion is sent as api-version; DefaultAPIVersion when empty.
	APIVersion string
	// Workdir is the absolute directory in the session under which the
	// library keeps checkouts.
	Workdir string
	// Owner is the owner part of session identifiers; the OS user when
	// empty.
	Owner string
	// Credential gives the bearer tokens (scope Scope). Configure uses
	// TokenEnv or azidentity's default chain; tests pass a fake.
	Credential azcore.TokenCredential
	// MaxAttempts bounds the tries of a request answered 429 or 5xx;
	// DefaultMaxAttempts when zero.
	MaxAttempts int
	// KillGrace is how long a cancelled command has between SIGTERM and
	// SIGKILL; DefaultKillGrace when zero.
	KillGrace time.Duration
}

// Provider is the registered provider.
type Provider struct{}

func init() { provider.Register(Provider{}) }

// Spec describes the provider.
func (Provider) Spec() provider.Spec { return azuredynamicsessionsspec.Spec() }

// Configure parses cfg, takes the token from TokenEnv or azidentity's
// default chain and returns a *Backend. It makes no API call.
func (Provider) Configure(cfg provider.Config, rt provider.Runtime) (provider.Backend, error) {
	c, err := ParseConfig(cfg)
	if err != nil {
		return nil, err
	}
	rt = rt.WithDefaults()
	if tok := strings.TrimSpace(os.Getenv(azuredynamicsessionsspec.TokenEnv)); tok != "" {
		c.Credential = StaticToken(tok)
	} else {
		cred, err := azidentity.NewDefaultAzureCredential(&azidentity.DefaultAzureCredentialOptions{
			ClientOptions: azcore.ClientOptions{Transport: rt.HTTPClient},
		})
		if err != nil {
			return nil, fmt.Errorf("%s provider: no usable credentials (run `az login`, or set %s or the AZURE_* variables): %w",
				Name, azuredynamicsessionsspec.TokenEnv, provider.ErrUnauthenticated)
		}
		c.Credential = cred
	}
	return New(c, rt)
}

// ParseConfig turns raw options into a Config (without credentials).
func ParseConfig(cfg provider.Config) (Config, error) {
	return Config{
		Endpoint: strings.TrimSpace(cfg["endpoint"]), APIVersion: strings.TrimSpace(cfg["api-version"]),
		Workdir: strings.TrimSpace(cfg["workdir"]), Owner: strings.TrimSpace(cfg["owner"]),
	}, nil
}

// withDefaults fills in defaults and validates c, naming what is wrong.
func (c Config) withDefaults() (Config, error) {
	if c.APIVersion == "" {
		c.APIVersion = DefaultAPIVersion
	}
	if c.Workdir == "" {
		c.Workdir = DefaultWorkdir
	}
	if c.Owner == "" {
		c.Owner = cloud.CurrentUser()
	}
	if c.MaxAttempts == 0 {
		c.MaxAttempts = DefaultMaxAttempts
	}
	if c.KillGrace == 0 {
		c.KillGrace = DefaultKillGrace
	}
	c.Endpoint = strings.TrimRight(c.Endpoint, "/")
	owner := sanitizeOwner(c.Owner)
	switch _, ok := delegated.ParseBaseURL(c.Endpoint); {
	case c.Endpoint == "":
		return c, fmt.Errorf("%s provider: no pool management endpoint: set the endpoint option or %s (az containerapp sessionpool show --query properties.poolManagementEndpoint)",
			Name, azuredynamicsessionsspec.EndpointEnv)
	case !ok:
		return c, fmt.Errorf("%s provider: config \"endpoint\" %q is not an http(s) URL without a query", Name, c.Endpoint)
	case strings.Contains(c.Endpoint, "@"):
		return c, fmt.Errorf("%s provider: config \"endpoint\" must not carry user information", Name)
	case owner == "":
		return c, fmt.Errorf("%s provider: config \"owner\" %q has no letter or digit", Name, c.Owner)
	case c.Credential == nil:
		return c, fmt.Errorf("%s provider: no credential: %w", Name, provider.ErrUnauthenticated)
	case c.MaxAttempts < 1:
		return c, fmt.Errorf("%s provider: max attempts %d, want at least 1", Name, c.MaxAttempts)
	case c.KillGrace < 0:
		return c, fmt.Errorf("%s provider: negative kill grace %s", Name, c.KillGrace)
	}
	c.Owner = owner
	if err := checkPath(c.Workdir); err != nil {
		return c, fmt.Errorf("%s provider: config \"workdir\": %w", Name, err)
	}
	if c.Workdir == "/" || c.Workdir == FilesDir {
		return c, fmt.Errorf("%s provider: config \"workdir\" %q is not a directory of its own; pick one such as %s", Name, c.Workdir, DefaultWorkdir)
	}
	return c, nil
}

// sanitizeOwner keeps the letters, digits, '.' and '_' of an owner name
// (at most 32): it is a part of session identifiers, between '-'.
func sanitizeOwner(s string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(s) {
		if b.Len() == 32 {
			break
		}
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '.' || r == '_' {
			b.WriteRune(r)
		}
	}
	return strings.Trim(b.String(), "._")
}

// checkPath rejects a session path that is not absolute and clean, or
// holds characters a shell script must not see unquoted.
func checkPath(p string) error {
	switch {
	case !strings.HasPrefix(p, "/"):
		return fmt.Errorf("path %q is not absolute", p)
	case path.Clean(p) != p:
		return fmt.Errorf("path %q is not clean (no \"..\", \".\", \"//\" or trailing \"/\")", p)
	case strings.ContainsAny(p, "\x00\n"):
		return errors.New("path contains a NUL byte or a newline")
	}
	return nil
}

// StaticToken is a credential that always gives one bearer token (from
// TokenEnv), valid for an hour as far as crabbox knows.
type StaticToken string

// GetToken returns the token.
func (t StaticToken) GetToken(context.Context, policy.TokenRequestOptions) (azcore.AccessToken, error) {
	return azcore.AccessToken{Token: string(t), ExpiresOn: time.Now().Add(time.Hour)}, nil
}

var (
	_ provider.Provider             = Provider{}
	_ provider.DelegatedRunBackend  = (*Backend)(nil)
	_ provider.DelegatedFileBackend = (*Backend)(nil)
	_ provider.CleanupBackend       = (*Backend)(nil)
	_ provider.DoctorBackend        = (*Backend)(nil)
)
