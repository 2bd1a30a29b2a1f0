// Package coordinatorcmd is the command line of the coordinator server,
// the program crabbox-coordinator (which `crabbox coordinator ...` runs):
// serve listens with a coordinator built from the library (package
// coordinator, a store, the portal) and token issues user tokens offline.
//
// It is a package rather than the program's main so that cmd/crabbox's
// tests can run the real server from their own test binary; only those
// and cmd/crabbox-coordinator import it. The crabbox CLI itself never
// links it.
package coordinatorcmd

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/peterbourgon/ff/v3"
	"github.com/peterbourgon/ff/v3/ffcli"

	"github.com/crabbox-dev/crabbox"
	"github.com/crabbox-dev/crabbox/cmd/internal/cli"
	"github.com/crabbox-dev/crabbox/coordinator"
	"github.com/crabbox-dev/crabbox/coordinator/api"
	"github.com/crabbox-dev/crabbox/coordinator/auth"
	"github.com/crabbox-dev/crabbox/coordinator/github"
	"github.com/crabbox-dev/crabbox/coordinator/portal"
	"github.com/crabbox-dev/crabbox/coordinator/store"
	"github.com/crabbox-dev/crabbox/coordinator/store/postgres"
	"github.com/crabbox-dev/crabbox/coordinator/store/sqlite"
	"github.com/crabbox-dev/crabbox/lease"
	"github.com/crabbox-dev/crabbox/provider"
)

// Name is the program's name.
const Name = "crabbox-coordinator"

// The environment of brokered mode (CRABBOX_COORDINATOR,
// CRABBOX_COORDINATOR_TOKEN, CRABBOX_COORDINATOR_MODE) is read by package
// config in the crabbox CLI; the server reads only its own below.

// Server secrets: each from its variable or from the file named by the
// variable with _FILE appended.
const (
	envAdminToken    = "CRABBOX_ADMIN_TOKEN"
	envSharedToken   = "CRABBOX_SHARED_TOKEN"
	envSessionSecret = "CRABBOX_SESSION_SECRET"
	envGitHubSecret  = "CRABBOX_GITHUB_CLIENT_SECRET"
)

// app is what every command shares: the standard streams.
type app struct {
	stdout, stderr io.Writer
}

func usagef(format string, args ...any) error { return cli.Usagef(format, args...) }

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// Main runs the program with args (without the program name) and the
// standard streams, and returns the process exit code. Providers are the
// registered ones (the program links providers/all). SIGINT, SIGTERM or
// SIGHUP should cancel ctx (cli.HandleSignals): serve then shuts down
// gracefully.
func Main(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	a := &app{stdout: stdout, stderr: stderr}
	p := &cli.Program{Name: Name, Root: a.rootCmd()}
	return p.Main(ctx, args, stdout, stderr)
}

func (a *app) rootCmd() *ffcli.Command {
	return &ffcli.Command{
		ShortUsage: "crabbox-coordinator <serve|token> ...",
		ShortHelp:  "run a coordinator, or issue tokens for one",
		LongHelp: cli.CoordinatorAbout + `

crabbox coordinator ARGS... runs this program with the same arguments.

  CRABBOX_ADMIN_TOKEN_FILE=/etc/crabbox/admin-token crabbox-coordinator serve --listen :8080`,
		FlagSet:     flag.NewFlagSet(Name, flag.ContinueOnError),
		Subcommands: []*ffcli.Command{a.coordinatorServeCmd(), a.coordinatorTokenCmd()},
		Exec:        func(context.Context, []string) error { return flag.ErrHelp },
	}
}

func (a *app) coordinatorServeCmd() *ffcli.Command {
	fs := flag.NewFlagSet("coordinator serve", flag.ContinueOnError)
	fs.SetOutput(a.stderr)
	listen := fs.String("listen", "127.0.0.1:8080", "address to serve the API on")
	db := fs.String("db", "", "database URL: sqlite:///path/to/file.db (default: coordinator.db in the state directory) or postgres://... (put a DSN with a password in CRABBOX_COORDINATOR_DB, not on the command line)")
	cfgPath := fs.String("config", "", "server config file (JSON: providers, limits, prices, orgs); default: the local provider only")
	logJSON := fs.Bool("log-json", true, "log JSON lines to stderr (false: text)")
	logLevel := fs.String("log-level", "info", "least level logged: debug (every request), info, warn or error")
	return &ffcli.Command{
		Name:       "serve",
		ShortUsage: "crabbox-coordinator serve [--listen ADDR] [--db URL] [--config FILE]",
		ShortHelp:  "serve the coordinator API until interrupted",
		LongHelp: `Serve the coordinator API. Flags may also come from CRABBOX_COORDINATOR_LISTEN,
CRABBOX_COORDINATOR_DB and CRABBOX_COORDINATOR_CONFIG.

Secrets come from the environment, or from files the environment names,
never from flags: CRABBOX_ADMIN_TOKEN, CRABBOX_SHARED_TOKEN and
CRABBOX_SESSION_SECRET (at least 32 bytes; signs user tokens), each also as
<NAME>_FILE=/path. At least one must be set.

SIGINT, SIGTERM or SIGHUP stops accepting requests, finishes those in flight (up to
30s), stops the maintenance loop and closes the database.

  CRABBOX_ADMIN_TOKEN_FILE=/etc/crabbox/admin-token crabbox-coordinator serve --listen :8080 --db sqlite:///var/lib/crabbox/coordinator.db`,
		FlagSet: fs,
		Options: []ff.Option{ff.WithEnvVarPrefix("CRABBOX_COORDINATOR")},
		Exec: func(ctx context.Context, args []string) error {
			if len(args) > 0 {
				return usagef("coordinator serve: unexpected arguments %q", args)
			}
			if err := noEmptyFlags(fs); err != nil {
				return err
			}
			if strings.Contains(*db, "://") && *db != os.Getenv("CRABBOX_COORDINATOR_DB") && dsnHasPassword(*db) {
				return usagef("coordinator serve: --db carries a password, which would show in the process list; set CRABBOX_COORDINATOR_DB instead")
			}
			var level slog.Level
			if err := level.UnmarshalText([]byte(*logLevel)); err != nil {
				return usagef("coordinator serve: --log-level %q: want debug, info, warn or error", *logLevel)
			}
			hopts := &slog.HandlerOptions{Level: level}
			var h slog.Handler = slog.NewJSONHandler(a.stderr, hopts)
			if !*logJSON {
				h = slog.NewTextHandler(a.stderr, hopts)
			}
			return serveCoordinator(ctx, slog.New(h), *listen, *db, *cfgPath)
		},
	}
}

// serveDefaults are the flags of coordinator serve that refuse an empty
// value, with what leaving them out gives.
var serveDefaults = map[string]string{
	"listen": "127.0.0.1:8080",
	"db":     "coordinator.db in the state directory",
	"config": "the local provider only",
}

// noEmptyFlags refuses an empty value given for one of serveDefaults'
// flags (--db ""): it would silently replace the value from the
// environment (ff skips empty variables, so only the command line sets
// one) with the default, such as a fresh SQLite file instead of the
// team's database.
func noEmptyFlags(fs *flag.FlagSet) error {
	var err error
	fs.Visit(func(f *flag.Flag) {
		if def, ok := serveDefaults[f.Name]; ok && err == nil && f.Value.String() == "" {
			err = usagef("coordinator serve: --%s is empty; leave it out to use %s or the default (%s)",
				f.Name, "CRABBOX_COORDINATOR_"+strings.ToUpper(f.Name), def)
		}
	})
	return err
}

// serverConfig is the coordinator's config file.
type serverConfig struct {
	// DefaultOrg is the org of requests that name none (default "default").
	DefaultOrg string `json:"defaultOrg"`
	// SharedOwner owns requests made with the shared token.
	SharedOwner string `json:"sharedOwner"`
	// AdminOwners are user-token owners with admin rights.
	AdminOwners []string `json:"adminOwners"`
	// Providers are the provider settings by provider name, as the
	// provider's options (crabbox providers describe NAME).
	Providers       map[string]provider.Config `json:"providers"`
	DefaultProvider string                     `json:"defaultProvider"`
	Limits          api.Limits                 `json:"limits"`
	Prices          []serverPrice              `json:"prices"`
	// Sizing, by provider, lets leases ask for their own server type,
	// image or location (see serverSizing).
	Sizing map[string]serverSizing `json:"sizing"`
	// MaintenanceInterval is the longest pause between maintenance passes
	// (a Go duration, e.g. "30s").
	MaintenanceInterval string `json:"maintenanceInterval"`
	// PublicURL is where browsers reach the coordinator, e.g.
	// https://crabbox.example.com (behind a TLS-terminating proxy too):
	// with https the portal's cookies are Secure, and GitHub sends the
	// browser sign-in back to its /v1/auth/github/callback.
	PublicURL string `json:"publicURL"`
	// GitHub, when set, lets people sign in to the portal with GitHub
	// (the app's secret from CRABBOX_GITHUB_CLIENT_SECRET or its _FILE).
	GitHub *serverGitHub `json:"github"`
	// StoragePrices are native checkpoint storage prices: USD per GB and
	// month (730 hours) by provider.
	StoragePrices map[string]float64 `json:"storagePrices"`
	// CheckpointLimits bound native checkpoints (0: the coordinator's
	// defaults; negative: unlimited).
	CheckpointLimits serverCheckpointLimits `json:"checkpointLimits"`
	// PoolProviderRequests bounds the provider creates for ready pools
	// this process runs at once per provider (0: the default, 4).
	PoolProviderRequests int `json:"poolProviderRequests"`
}

// serverCheckpointLimits are coordinator.CheckpointLimits in the config.
type serverCheckpointLimits struct {
	MaxPerOwner          int `json:"maxPerOwner"`
	MaxPerOrg            int `json:"maxPerOrg"`
	MaxCreations         int `json:"maxCreations"`
	MaxCreationsPerOwner int `json:"maxCreationsPerOwner"`
}

// serverGitHub is the GitHub OAuth app and who may sign in with it.
type serverGitHub struct {
	ClientID string   `json:"clientID"`
	Orgs     []string `json:"orgs"`
	Teams    []string `json:"teams"`
	// WebURL and APIURL default to github.com's; for GitHub Enterprise
	// Server, https://HOST and https://HOST/api/v3.
	WebURL string `json:"webURL"`
	APIURL string `json:"apiURL"`
}

type serverPrice struct {
	Provider   string  `json:"provider"`
	ServerType string  `json:"serverType"`
	HourlyUSD  float64 `json:"hourlyUSD"`
}

func loadServerConfig(path string) (serverConfig, error) {
	cfg := serverConfig{Providers: map[string]provider.Config{crabbox.DefaultProvider: {}}}
	if path != "" {
		b, err := os.ReadFile(path)
		if err != nil {
			return cfg, fmt.Errorf("coordinator config: %w", err)
		}
		cfg = serverConfig{}
		dec := json.NewDecoder(bytes.NewReader(b))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&cfg); err != nil {
			return cfg, fmt.Errorf("coordinator config %s: %w", path, err)
		}
		if len(cfg.Providers) == 0 {
			return cfg, fmt.Errorf("coordinator config %s: no providers", path)
		}
	}
	if cfg.DefaultOrg == "" {
		cfg.DefaultOrg = "default"
	}
	return cfg, nil
}

// githubClient is the GitHub sign-in of the server config, or nil.
func githubClient(cfg *serverGitHub) (*github.Client, error) {
	if cfg == nil {
		return nil, nil
	}
	secret, err := secretFromEnv(envGitHubSecret)
	if err != nil {
		return nil, err
	}
	if secret == "" {
		return nil, fmt.Errorf("coordinator config: github sign-in needs the OAuth app's secret in %s or %s_FILE", envGitHubSecret, envGitHubSecret)
	}
	gh, err := github.New(github.Config{ClientID: cfg.ClientID, ClientSecret: secret, Orgs: cfg.Orgs, Teams: cfg.Teams, WebURL: cfg.WebURL, APIURL: cfg.APIURL})
	if err != nil {
		return nil, fmt.Errorf("coordinator config: %w", err)
	}
	return gh, nil
}

// withPortal serves the browser portal under /portal beside the API, and
// redirects / there. Without a session secret (no user tokens) there is no
// portal: the API alone.
func withPortal(srv *coordinator.Server, tokens auth.Config, publicURL string, gh *github.Client, log *slog.Logger) (http.Handler, error) {
	if tokens.SessionSecret == "" {
		return srv, nil // serveCoordinator refused GitHub sign-in without it
	}
	secure := false
	if publicURL != "" {
		u, err := url.Parse(publicURL)
		if err != nil || u.Host == "" || (u.Scheme != "https" && u.Scheme != "http") {
			return nil, fmt.Errorf("coordinator config: publicURL %q: want https://host", publicURL)
		}
		secure = u.Scheme == "https"
	}
	p, err := portal.New(portal.Config{API: srv, Issuer: srv, SessionSecret: []byte(tokens.SessionSecret), Secure: secure, GitHub: gh, Logger: log})
	if err != nil {
		return nil, err
	}
	// Not a ServeMux: it would answer unclean API paths (//v1/whoami) with
	// an HTML redirect instead of the API's JSON.
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.URL.Path == portal.Prefix || strings.HasPrefix(r.URL.Path, portal.Prefix+"/"):
			p.ServeHTTP(w, r)
		case r.URL.Path == "/" && (r.Method == http.MethodGet || r.Method == http.MethodHead):
			http.Redirect(w, r, portal.Prefix+"/", http.StatusSeeOther)
		default:
			srv.ServeHTTP(w, r)
		}
	}), nil
}

// serveCoordinator runs the coordinator until ctx ends (SIGINT, SIGTERM or
// SIGHUP cancel it: cmd/crabbox-coordinator's main).
func serveCoordinator(ctx context.Context, log *slog.Logger, listen, dbURL, cfgPath string) (err error) {
	cfg, err := loadServerConfig(cfgPath)
	if err != nil {
		return err
	}
	tokens := auth.Config{SharedOwner: cfg.SharedOwner, AdminOwners: cfg.AdminOwners, DefaultOrg: cfg.DefaultOrg}
	for _, s := range []struct {
		env string
		dst *string
	}{{envAdminToken, &tokens.AdminToken}, {envSharedToken, &tokens.SharedToken}, {envSessionSecret, &tokens.SessionSecret}} {
		if *s.dst, err = secretFromEnv(s.env); err != nil {
			return err
		}
	}
	if err := tokens.Validate(); err != nil {
		return fmt.Errorf("coordinator: %w (set %s, %s or %s, or their _FILE forms)", err, envAdminToken, envSharedToken, envSessionSecret)
	}
	interval := time.Duration(0)
	if cfg.MaintenanceInterval != "" {
		if interval, err = time.ParseDuration(cfg.MaintenanceInterval); err != nil || interval <= 0 {
			return fmt.Errorf("coordinator config: maintenanceInterval %q is not a positive duration", cfg.MaintenanceInterval)
		}
	}
	stateDir, err := lease.DefaultDir()
	if err != nil {
		return err
	}
	stateDir = filepath.Join(stateDir, "coordinator")
	if err := os.MkdirAll(stateDir, 0o700); err != nil {
		return fmt.Errorf("coordinator state directory: %w", err)
	}
	var st store.Store
	if dbURL == "" {
		path := filepath.Join(stateDir, "coordinator.db")
		dbURL = "sqlite://" + filepath.ToSlash(path)
		st, err = sqlite.Open(ctx, path)
	} else {
		st, err = openStore(ctx, dbURL)
	}
	if err != nil {
		return err
	}
	defer func() {
		if cerr := st.Close(); cerr != nil {
			err = errors.Join(err, fmt.Errorf("close database: %w", cerr))
		}
	}()
	backends, err := serverBackends(cfg.Providers, provider.Runtime{Logger: log, StateDir: stateDir})
	defer func() {
		for _, b := range backends {
			if c, ok := b.(io.Closer); ok {
				err = errors.Join(err, c.Close())
			}
		}
	}()
	if err != nil {
		return err
	}
	made := &sizedBackends{rt: provider.Runtime{Logger: log, StateDir: stateDir}.WithDefaults()}
	defer func() { err = errors.Join(err, made.Close()) }()
	sizing, err := serverSizings(cfg.Providers, cfg.Sizing, made)
	if err != nil {
		return err
	}
	prices := make([]coordinator.Price, len(cfg.Prices))
	for i, p := range cfg.Prices {
		prices[i] = coordinator.Price{Provider: p.Provider, ServerType: p.ServerType, HourlyUSD: p.HourlyUSD}
	}
	gh, err := githubClient(cfg.GitHub)
	if err != nil {
		return err
	}
	if gh != nil && tokens.SessionSecret == "" {
		return fmt.Errorf("coordinator config: github sign-in needs %s (it signs the tokens it issues)", envSessionSecret)
	}
	srv, err := coordinator.New(coordinator.Config{
		Store: st, Providers: backends, DefaultProvider: cfg.DefaultProvider, Tokens: tokens,
		Limits: cfg.Limits, Prices: prices, Sizing: sizing, Logger: log, MaintenanceInterval: interval,
		GitHub: gh, PublicURL: cfg.PublicURL, StoragePrices: cfg.StoragePrices,
		CheckpointLimits:     coordinator.CheckpointLimits(cfg.CheckpointLimits),
		PoolProviderRequests: cfg.PoolProviderRequests,
	})
	if err != nil {
		return err
	}

	handler, err := withPortal(srv, tokens, cfg.PublicURL, gh, log)
	if err != nil {
		return err
	}

	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return fmt.Errorf("coordinator: listen: %w", err)
	}
	hs := srv.HTTPServer()
	hs.Handler = handler
	hs.ErrorLog = slog.NewLogLogger(log.Handler(), slog.LevelWarn)
	maintCtx, stopMaint := context.WithCancel(context.WithoutCancel(ctx))
	maintDone := make(chan error, 1)
	go func() { maintDone <- srv.Run(maintCtx) }()
	serveDone := make(chan error, 1)
	go func() { serveDone <- hs.Serve(ln) }()
	log.Info("coordinator listening", "addr", ln.Addr().String(), "db", redactDSN(dbURL), "providers", providerNames(backends))

	select {
	case err = <-serveDone: // the listener failed
	case <-ctx.Done():
		log.Info("coordinator shutting down: finishing requests in flight")
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		err = hs.Shutdown(sctx)
		cancel()
		if err != nil {
			err = errors.Join(fmt.Errorf("coordinator shutdown: %w", err), hs.Close())
		}
		<-serveDone
	}
	stopMaint()
	err = errors.Join(err, <-maintDone)
	if err == nil {
		log.Info("coordinator stopped")
	}
	return err
}

// secretFromEnv reads a secret from env or from the file named by env_FILE.
func secretFromEnv(env string) (string, error) {
	v, file := os.Getenv(env), os.Getenv(env+"_FILE")
	switch {
	case v != "" && file != "":
		return "", fmt.Errorf("both %s and %s_FILE are set; set one", env, env)
	case file == "":
		return v, nil
	}
	return readSecretFile(file, env+"_FILE")
}

func readSecretFile(path, what string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("%s: %w", what, err)
	}
	s := strings.TrimRight(string(b), "\r\n")
	if s == "" {
		return "", fmt.Errorf("%s: %s is empty", what, path)
	}
	return s, nil
}

// openStore opens the database named by a sqlite:// or postgres:// URL.
func openStore(ctx context.Context, dbURL string) (store.Store, error) {
	u, err := url.Parse(dbURL)
	if err != nil {
		return nil, fmt.Errorf("database URL %s: not a URL", redactDSN(dbURL))
	}
	switch u.Scheme {
	case "sqlite":
		path := u.Path
		if u.Opaque != "" {
			path = u.Opaque // sqlite:relative/path
		}
		if u.Host != "" || path == "" {
			return nil, fmt.Errorf("database URL %q: want sqlite:///absolute/path.db or sqlite:relative/path.db", dbURL)
		}
		if runtime.GOOS == "windows" && len(path) > 2 && path[0] == '/' && path[2] == ':' {
			path = path[1:] // sqlite:///C:/dir/file.db
		}
		path = filepath.FromSlash(path)
		if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
			return nil, fmt.Errorf("database directory: %w", err)
		}
		return sqlite.Open(ctx, path)
	case "postgres", "postgresql":
		return postgres.Open(ctx, dbURL)
	}
	return nil, fmt.Errorf("database URL %s: want sqlite:///path or postgres://...", redactDSN(dbURL))
}

func dsnHasPassword(dsn string) bool {
	u, err := url.Parse(dsn)
	if err != nil {
		return strings.Contains(dsn, "@") // unparsable: assume the worst
	}
	_, ok := u.User.Password()
	return ok || u.Query().Get("password") != ""
}

// redactDSN hides a database URL's password.
func redactDSN(dsn string) string {
	u, err := url.Parse(dsn)
	if err != nil {
		return "(unparsable URL)"
	}
	q := u.Query()
	if q.Has("password") {
		q.Set("password", "xxxxx")
		u.RawQuery = q.Encode()
	}
	return u.Redacted()
}

// serverBackends configures the coordinator's providers. On error it
// returns the backends made so far, for the caller to close.
func serverBackends(cfgs map[string]provider.Config, rt provider.Runtime) (map[string]provider.SSHLeaseBackend, error) {
	out := map[string]provider.SSHLeaseBackend{}
	rt = rt.WithDefaults()
	for name, raw := range cfgs {
		p, err := provider.Default().Lookup(name)
		if err != nil {
			return out, fmt.Errorf("coordinator config: %w", err)
		}
		spec := p.Spec()
		cfg, err := spec.Resolve(raw)
		if err != nil {
			return out, fmt.Errorf("coordinator config: %w", err)
		}
		for k, v := range spec.CoordinatorSettings {
			if raw[k] == "" {
				cfg[k] = v
			}
		}
		b, err := p.Configure(cfg, rt)
		if err != nil {
			return out, fmt.Errorf("coordinator config: provider %q: %w", name, err)
		}
		sb, ok := b.(provider.SSHLeaseBackend)
		if !ok {
			if c, ok := b.(io.Closer); ok {
				c.Close()
			}
			return out, fmt.Errorf("coordinator config: provider %q runs commands itself (%s); a coordinator brokers SSH leases only", name, spec.Kind)
		}
		out[spec.Name] = sb
	}
	return out, nil
}

func providerNames(m map[string]provider.SSHLeaseBackend) []string {
	names := make([]string, 0, len(m))
	for n := range m {
		names = append(names, n)
	}
	return names
}

func (a *app) coordinatorTokenCmd() *ffcli.Command {
	fs := flag.NewFlagSet("coordinator token", flag.ContinueOnError)
	fs.SetOutput(a.stderr)
	return &ffcli.Command{
		Name:       "token",
		ShortUsage: "crabbox-coordinator token issue --owner O --org G [--ttl D]",
		ShortHelp:  "issue signed user tokens",
		LongHelp: `Issue user tokens signed with the coordinator's session secret.

  crabbox-coordinator token issue --owner alice --org platform`,
		FlagSet:     fs,
		Subcommands: []*ffcli.Command{a.coordinatorTokenIssueCmd()},
		Exec:        func(context.Context, []string) error { return flag.ErrHelp },
	}
}

func (a *app) coordinatorTokenIssueCmd() *ffcli.Command {
	fs := flag.NewFlagSet("coordinator token issue", flag.ContinueOnError)
	fs.SetOutput(a.stderr)
	owner := fs.String("owner", "", "owner the token authenticates as (required)")
	org := fs.String("org", "", "org of the owner (required)")
	login := fs.String("login", "", "login name at the identity provider, if any")
	ttl := fs.Duration("ttl", 180*24*time.Hour, "how long the token is valid")
	secretFile := fs.String("secret-file", "", "file holding the session secret (default: CRABBOX_SESSION_SECRET or CRABBOX_SESSION_SECRET_FILE)")
	asJSON := fs.Bool("json", false, "print the token with its claims as JSON")
	return &ffcli.Command{
		Name:       "issue",
		ShortUsage: "crabbox-coordinator token issue --owner O --org G [--ttl D] [--secret-file F]",
		ShortHelp:  "mint a user token signed with the coordinator's session secret",
		LongHelp: `Mint a signed user token (cbxu_...) for owner and org, valid for --ttl. The
secret is the coordinator's session secret, from --secret-file or the
environment (CRABBOX_SESSION_SECRET, or CRABBOX_SESSION_SECRET_FILE), never a
flag. The token goes to stdout; give it to the user as
CRABBOX_COORDINATOR_TOKEN. With --json its ID is printed too: crabbox admin
revoke-token ID revokes it.

  crabbox-coordinator token issue --owner alice --org platform --ttl 720h --secret-file /etc/crabbox/session-secret`,
		FlagSet: fs,
		Exec: func(ctx context.Context, args []string) error {
			if len(args) > 0 {
				return usagef("coordinator token issue: unexpected arguments %q", args)
			}
			if strings.TrimSpace(*owner) == "" || strings.TrimSpace(*org) == "" {
				return usagef("coordinator token issue: --owner and --org are required")
			}
			if *ttl <= 0 {
				return usagef("coordinator token issue: --ttl %s: want a positive duration", *ttl)
			}
			var secret string
			var err error
			if *secretFile != "" {
				secret, err = readSecretFile(*secretFile, "--secret-file")
			} else {
				secret, err = secretFromEnv(envSessionSecret)
				if err == nil && secret == "" {
					err = fmt.Errorf("no session secret: set %s (or %s_FILE) or --secret-file", envSessionSecret, envSessionSecret)
				}
			}
			if err != nil {
				return err
			}
			now := time.Now().UTC().Truncate(time.Second)
			claims := auth.Claims{ID: uuid.NewString(), Owner: *owner, Org: *org, Login: *login, IssuedAt: now, ExpiresAt: now.Add(*ttl)}
			token, err := auth.MintUserToken([]byte(secret), claims)
			if err != nil {
				return fmt.Errorf("issue token: %w", err)
			}
			if *asJSON {
				return writeJSON(a.stdout, struct {
					Token     string    `json:"token"`
					ID        string    `json:"id"`
					Owner     string    `json:"owner"`
					Org       string    `json:"org"`
					Login     string    `json:"login,omitempty"`
					IssuedAt  time.Time `json:"issuedAt"`
					ExpiresAt time.Time `json:"expiresAt"`
				}{token, claims.ID, claims.Owner, claims.Org, claims.Login, claims.IssuedAt, claims.ExpiresAt})
			}
			fmt.Fprintln(a.stdout, token)
			return nil
		},
	}
}
