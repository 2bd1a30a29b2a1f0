// Package coordinator is the crabbox coordinator: an http.Handler that owns
// provider credentials, lease state, run history, usage and spend limits for
// a team, plus the maintenance loop that deletes the servers of expired and
// released leases.
//
// The wire format is the one in the coordinator API spec (types in package
// coordinator/api); state lives behind store.Store (SQLite or PostgreSQL);
// boxes come from provider.SSHLeaseBackend values the caller configures.
// Provider calls never happen inside a store transaction: a lease is
// committed as provisioning before Acquire and activated after it, and
// cleanup claims a lease with a fencing token, deletes its server, then
// commits with that token. Several Servers (processes) may share one store.
//
// A typical main:
//
//	srv, err := coordinator.New(coordinator.Config{Store: st, Providers: backends, Tokens: tokens})
//	go srv.Run(ctx)                      // maintenance loop
//	hs := srv.HTTPServer()               // API, with header, body and idle timeouts
//	hs.Addr = addr
//	hs.ListenAndServe()
package coordinator

import (
	"cmp"
	"context"
	"crypto/cipher"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math"
	"net/http"
	"strings"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/crabbox-dev/crabbox/coordinator/api"
	"github.com/crabbox-dev/crabbox/coordinator/auth"
	"github.com/crabbox-dev/crabbox/coordinator/github"
	"github.com/crabbox-dev/crabbox/coordinator/store"
	"github.com/crabbox-dev/crabbox/provider"
)

// Config configures a Server. Secrets (in Tokens) are values: the caller
// reads them from the environment or files, never from flags.
type Config struct {
	// Store holds the coordinator's state. Required. The Server does not
	// close it.
	Store store.Store
	// Providers are the server-side provider backends by provider name,
	// built by the caller with the coordinator's own credentials. A
	// backend that is a provider.SSHLoginBackend is asked for a login
	// whenever a lease's owner is answered with the lease to connect to
	// (create, get, heartbeat); the login is cached in memory until near
	// its expiry and never stored, listed or logged.
	Providers map[string]provider.SSHLeaseBackend
	// DefaultProvider is used when a lease request names none. Empty means
	// the request must name one (or, with exactly one provider configured,
	// that one).
	DefaultProvider string
	// Tokens are the admin token, shared token, session secret and the
	// identity settings. At least one credential is required.
	Tokens auth.Config
	// GitHub, when set with a session secret, serves GitHub sign-in for
	// the CLI (the device flow: POST /v1/auth/device and
	// /v1/auth/device/token), issuing each allowed user a recorded user
	// token that lasts DeviceTokenTTL (default DefaultDeviceTokenTTL).
	GitHub         *github.Client
	DeviceTokenTTL time.Duration
	// TokenRecheckInterval is how often the maintenance loop checks the
	// user of a device-flow token with GitHub again (default
	// DefaultTokenRecheckInterval); a user GitHub no longer allows has
	// the token revoked.
	TokenRecheckInterval time.Duration
	// MaxDeviceSignIns bounds the device-flow requests worked on at once
	// (they need no token and each ask GitHub); more get 429. 0 means
	// DefaultMaxDeviceSignIns.
	MaxDeviceSignIns int
	// PublicURL is where browsers and clients reach the coordinator
	// (https://HOST, no path): GitHub sends the browser sign-in
	// (POST /v1/auth/github/start) back to PublicURL+GitHubCallbackPath.
	// Empty means the host each start request was sent to.
	PublicURL string
	// MaxPendingGitHubLogins bounds the browser sign-ins kept at once
	// (more starts get 429); 0 means DefaultMaxPendingGitHubLogins.
	MaxPendingGitHubLogins int
	// Limits are the active-lease and monthly reserved-USD maxima; zero
	// fields are unlimited.
	Limits api.Limits
	// Prices are hourly prices by provider and server type.
	Prices []Price
	// StoragePrices are the storage prices of native checkpoints: USD per
	// GB (10^9 bytes) and month (730 hours) by provider name. A
	// checkpoint's artifact accrues its size times the price over the
	// time it exists; that counts in usage and monthly limits.
	StoragePrices map[string]float64
	// CheckpointLimits bound brokered native checkpoints (zero fields:
	// the Default* constants).
	CheckpointLimits CheckpointLimits
	// CheckpointTimeout bounds a provider's CreateCheckpoint; 0 means 30
	// minutes. A checkpoint still creating well after it is taken for
	// failed by the maintenance loop, which deletes what it left.
	CheckpointTimeout time.Duration
	// Sizing, by provider name, lets leases of that provider ask for their
	// own class, server type, image and location, and names the server
	// types its backend asks for. A provider without one gets no per-lease
	// size: a request's fields are recorded as the client's.
	Sizing map[string]Sizing
	// Clock is the time source; nil means the real clock.
	Clock clockwork.Clock
	// Logger receives structured logs; nil discards them.
	Logger *slog.Logger

	// MaxBodyBytes bounds request bodies (except a run's finish, which
	// carries its log); 0 means DefaultMaxBodyBytes.
	MaxBodyBytes int64
	// ProvisionTimeout bounds a provider's Acquire; 0 means 30 minutes.
	// A client disconnecting does not cancel provisioning.
	ProvisionTimeout time.Duration
	// MaintenanceInterval is the longest the maintenance loop sleeps
	// between passes (it wakes earlier for a known expiry); 0 means 30s.
	MaintenanceInterval time.Duration
	// CleanupClaimHold is how long a cleanup claim holds before another
	// coordinator may take the lease over. The holder renews it every
	// third of the hold while it deletes the server, so a coordinator
	// killed mid-delete holds the lease only this long. 0 means 1 minute.
	CleanupClaimHold time.Duration
	// CleanupTimeout bounds one provider delete; 0 means 10 minutes.
	CleanupTimeout time.Duration
	// CleanupRetryBase and CleanupRetryMax bound the exponential backoff
	// between failed deletes: 0 means 30 seconds and 30 minutes.
	CleanupRetryBase time.Duration
	CleanupRetryMax  time.Duration

	// BodyReadTimeout bounds reading a request's body, from the start of
	// the request: a client that stops sending mid-body gets its
	// connection closed instead of holding a handler. 0 means 2 minutes.
	BodyReadTimeout time.Duration
	// ReadHeaderTimeout and IdleTimeout configure the http.Server that
	// HTTPServer returns: 0 means 10 seconds and 2 minutes.
	ReadHeaderTimeout time.Duration
	IdleTimeout       time.Duration
	// TouchInterval is the shortest time between two passes of provider
	// touches (moving a box's labels after heartbeats), and TouchBudget
	// how many touches one pass sends per provider at most; touches
	// beyond it wait for the next pass. Only a lease's latest touch is
	// sent. 0 means 1 minute and 20.
	TouchInterval time.Duration
	TouchBudget   int
	// PoolProviderRequests bounds the provider creates for ready pools
	// (with their health checks) that one coordinator process runs at
	// once per provider; 0 means DefaultPoolProviderRequests.
	PoolProviderRequests int

	// MaxControlConnections bounds the control websockets (GET
	// /v1/control) open at once, MaxControlPerIdentity those of one owner
	// and org; more get 429. The same maxima bound, apart, the event
	// requests that wait for a run's next event (GET
	// /v1/runs/{id}/events?wait=). ControlPollInterval is how often a control
	// websocket that follows runs reads the store for events another
	// coordinator appended. 0 means the Default* constants.
	MaxControlConnections int
	MaxControlPerIdentity int
	ControlPollInterval   time.Duration

	// MaxTerminals bounds the terminal websockets (GET
	// /v1/leases/{id}/terminal) open at once, MaxTerminalsPerIdentity
	// those of one owner and org; more get 429. TerminalIdleTimeout
	// closes a terminal through which nothing went either way for that
	// long. 0 means the Default* constants.
	MaxTerminals            int
	MaxTerminalsPerIdentity int
	TerminalIdleTimeout     time.Duration
	// MaxSSHRelaysPerIdentity bounds the SSH connections one owner and
	// org holds open through the coordinator (GET /v1/leases/{id}/ssh);
	// more get 429. 0 means DefaultMaxSSHRelaysPerIdentity.
	MaxSSHRelaysPerIdentity int
}

// Server is the coordinator: an http.Handler for the API and a maintenance
// loop (Run). It is safe for concurrent use.
type Server struct {
	store     store.Store
	providers map[string]provider.SSHLeaseBackend
	defProv   string
	auth      *auth.Authenticator
	limits    api.Limits
	prices    []Price
	// storagePrices and checkpointLimits: see Config.
	storagePrices     map[string]float64
	checkpointLimits  store.CheckpointLimits
	checkpointTimeout time.Duration
	sizing            map[string]Sizing
	clock             clockwork.Clock
	log               *slog.Logger
	metrics           *metrics
	mux               *http.ServeMux

	maxBody          int64
	provisionTimeout time.Duration
	interval         time.Duration
	claimHold        time.Duration
	cleanupTimeout   time.Duration
	retryBase        time.Duration
	retryMax         time.Duration
	bodyTimeout      time.Duration
	headerTimeout    time.Duration
	idleTimeout      time.Duration
	touchInterval    time.Duration
	touchBudget      int

	// poolSecret derives the ready pool boxes' keys (nil: no pools).
	poolSecret []byte
	// accessSecret derives the coordinator's box access keys (nil: the
	// coordinator cannot reach boxes itself).
	accessSecret []byte
	// bridges are the open connections through the coordinator to boxes.
	bridges bridges
	// accessKeys caches the access keys lease answers carry.
	accessKeys accessKeyCache
	// previews are the cached connections of port previews (proxy.go).
	previews previewBoxes
	// relays counts the open SSH relays by identity (owner and org).
	relays slots
	// desktops counts the open desktop (VNC) bridges by lease.
	desktops slots
	// pools tracks this process's pool passes; poolSlots bound its
	// provider creates for pools, per provider.
	pools     poolRuns
	poolSlots map[string]chan struct{}

	// touches are the provider touches heartbeats queued.
	touches touchQueue
	// logins are the SSH logins issued to lease owners (see sshLogin).
	logins loginCache
	// wake nudges the maintenance loop after a release queued a deletion.
	wake chan struct{}
	// secret signs the user tokens IssueUserToken mints (nil: none).
	secret          []byte
	github          *github.Client
	deviceTTL       time.Duration
	recheckInterval time.Duration
	// sealer seals the GitHub credentials kept with device-flow tokens.
	sealer cipher.AEAD
	// deviceSlots holds a token per device-flow request in progress.
	deviceSlots chan struct{}
	defaultOrg  string
	// revocations are the revoked token IDs, refreshed from the store.
	revocations revocations
	// control holds the open control websockets.
	control *controlHub
	// terminals counts the open terminals; terminalIdle closes an idle one.
	terminals    *terminalHub
	terminalIdle time.Duration
	// githubLogins are the browser sign-ins in progress.
	githubLogins *githubLogins
	publicURL    string
}

// New validates cfg and returns a Server. It does no I/O.
func New(cfg Config) (*Server, error) {
	if cfg.Store == nil {
		return nil, errors.New("coordinator: no store")
	}
	a, err := auth.New(cfg.Tokens)
	if err != nil {
		return nil, fmt.Errorf("coordinator: %w", err)
	}
	if err := checkLimits(cfg.Limits); err != nil {
		return nil, fmt.Errorf("coordinator: limits: %w", err)
	}
	for _, p := range cfg.Prices {
		if p.Provider == "" || !(p.HourlyUSD >= 0) || math.IsInf(p.HourlyUSD, 0) {
			return nil, fmt.Errorf("coordinator: price %+v: want a provider and a non-negative hourly price", p)
		}
	}
	for name, p := range cfg.StoragePrices {
		if !providerName.MatchString(name) || !(p >= 0) || math.IsInf(p, 0) {
			return nil, fmt.Errorf("coordinator: storage price %q=%v: want a provider name and a non-negative USD per GB-month", name, p)
		}
	}
	if cfg.CheckpointTimeout < 0 {
		return nil, errors.New("coordinator: checkpoint timeout must not be negative")
	}
	for name, b := range cfg.Providers {
		if !providerName.MatchString(name) {
			return nil, fmt.Errorf("coordinator: provider name %q: want lowercase letters, digits, - and _", name)
		}
		if b == nil {
			return nil, fmt.Errorf("coordinator: provider %q has no backend", name)
		}
	}
	if cfg.CleanupClaimHold != 0 && cfg.CleanupClaimHold < 3*time.Second {
		return nil, fmt.Errorf("coordinator: cleanup claim hold %s is shorter than 3s", cfg.CleanupClaimHold)
	}
	if cfg.TouchInterval < 0 || cfg.TouchBudget < 0 {
		return nil, errors.New("coordinator: touch interval and budget must not be negative")
	}
	if cfg.PoolProviderRequests < 0 {
		return nil, errors.New("coordinator: pool provider requests must not be negative")
	}
	if cfg.MaxControlConnections < 0 || cfg.MaxControlPerIdentity < 0 || cfg.ControlPollInterval < 0 {
		return nil, errors.New("coordinator: control connection maxima and poll interval must not be negative")
	}
	if cfg.MaxTerminals < 0 || cfg.MaxTerminalsPerIdentity < 0 || cfg.TerminalIdleTimeout < 0 {
		return nil, errors.New("coordinator: terminal maxima and idle timeout must not be negative")
	}
	for name, z := range cfg.Sizing {
		if _, ok := cfg.Providers[name]; !ok {
			return nil, fmt.Errorf("coordinator: sizing for provider %q, which is not configured", name)
		}
		if err := z.check(name); err != nil {
			return nil, fmt.Errorf("coordinator: %w", err)
		}
	}
	publicURL, err := checkPublicURL(cfg.PublicURL)
	if err != nil {
		return nil, fmt.Errorf("coordinator: %w", err)
	}
	if cfg.DefaultProvider != "" {
		if _, ok := cfg.Providers[cfg.DefaultProvider]; !ok {
			return nil, fmt.Errorf("coordinator: default provider %q is not configured", cfg.DefaultProvider)
		}
	}
	s := &Server{
		store:             cfg.Store,
		providers:         cfg.Providers,
		defProv:           cfg.DefaultProvider,
		auth:              a,
		limits:            cfg.Limits,
		prices:            cfg.Prices,
		storagePrices:     maps.Clone(cfg.StoragePrices),
		checkpointLimits:  cfg.CheckpointLimits.store(),
		checkpointTimeout: cmp.Or(cfg.CheckpointTimeout, 30*time.Minute),
		sizing:            cfg.Sizing,
		clock:             cmp.Or[clockwork.Clock](cfg.Clock, clockwork.NewRealClock()),
		log:               cmp.Or(cfg.Logger, slog.New(slog.DiscardHandler)),
		maxBody:           cmp.Or(cfg.MaxBodyBytes, DefaultMaxBodyBytes),
		provisionTimeout:  cmp.Or(cfg.ProvisionTimeout, 30*time.Minute),
		interval:          cmp.Or(cfg.MaintenanceInterval, 30*time.Second),
		claimHold:         cmp.Or(cfg.CleanupClaimHold, time.Minute),
		cleanupTimeout:    cmp.Or(cfg.CleanupTimeout, 10*time.Minute),
		retryBase:         cmp.Or(cfg.CleanupRetryBase, 30*time.Second),
		retryMax:          cmp.Or(cfg.CleanupRetryMax, 30*time.Minute),
		bodyTimeout:       cmp.Or(cfg.BodyReadTimeout, 2*time.Minute),
		headerTimeout:     cmp.Or(cfg.ReadHeaderTimeout, 10*time.Second),
		idleTimeout:       cmp.Or(cfg.IdleTimeout, 2*time.Minute),
		touchInterval:     cmp.Or(cfg.TouchInterval, time.Minute),
		touchBudget:       cmp.Or(cfg.TouchBudget, 20),
		wake:              make(chan struct{}, 1),
		defaultOrg:        cfg.Tokens.DefaultOrg,
		github:            cfg.GitHub,
		deviceTTL:         cmp.Or(cfg.DeviceTokenTTL, DefaultDeviceTokenTTL),
		recheckInterval:   cmp.Or(cfg.TokenRecheckInterval, DefaultTokenRecheckInterval),
		deviceSlots:       make(chan struct{}, max(cmp.Or(cfg.MaxDeviceSignIns, DefaultMaxDeviceSignIns), 1)),
		control: newControlHub(cmp.Or(cfg.MaxControlConnections, DefaultMaxControlConnections),
			cmp.Or(cfg.MaxControlPerIdentity, DefaultMaxControlPerIdentity),
			cmp.Or(cfg.ControlPollInterval, DefaultControlPollInterval)),
		terminals: newTerminalHub(cmp.Or(cfg.MaxTerminals, DefaultMaxTerminals),
			cmp.Or(cfg.MaxTerminalsPerIdentity, DefaultMaxTerminalsPerIdentity)),
		terminalIdle: cmp.Or(cfg.TerminalIdleTimeout, DefaultTerminalIdleTimeout),
		githubLogins: newGitHubLogins(max(cmp.Or(cfg.MaxPendingGitHubLogins, DefaultMaxPendingGitHubLogins), 1)),
		publicURL:    publicURL,
	}
	s.warnUnusablePrices()
	s.poolSecret = poolSecret(cfg.Tokens)
	s.accessSecret = accessSecret(cfg.Tokens)
	s.relays.max = cmp.Or(max(cfg.MaxSSHRelaysPerIdentity, 0), DefaultMaxSSHRelaysPerIdentity)
	s.desktops.max = maxDesktopBridges
	s.poolSlots = map[string]chan struct{}{}
	for name := range s.providers {
		s.poolSlots[name] = make(chan struct{}, cmp.Or(cfg.PoolProviderRequests, DefaultPoolProviderRequests))
	}
	if cfg.Tokens.SessionSecret != "" {
		s.secret = []byte(cfg.Tokens.SessionSecret)
		if s.sealer, err = newCredentialSealer(s.secret); err != nil {
			return nil, fmt.Errorf("coordinator: %w", err)
		}
	}
	if s.defProv == "" && len(s.providers) == 1 {
		for name := range s.providers {
			s.defProv = name
		}
	}
	s.metrics = newMetrics(s)
	s.routes()
	return s, nil
}

func checkLimits(l api.Limits) error {
	if l.MaxActiveLeases < 0 || l.MaxActiveLeasesPerOwner < 0 || l.MaxActiveLeasesPerOrg < 0 {
		return errors.New("active lease maxima must not be negative")
	}
	if l.MaxMonthlyUSD < 0 || l.MaxMonthlyUSDPerOwner < 0 || l.MaxMonthlyUSDPerOrg < 0 {
		return errors.New("monthly USD maxima must not be negative")
	}
	return nil
}

// HTTPServer returns an http.Server serving s with the configured header
// and idle timeouts (the body timeout is applied per request by s
// itself); its Shutdown closes the control websockets (CloseControl).
// The caller sets Addr or calls Serve, and may set ErrorLog.
func (s *Server) HTTPServer() *http.Server {
	hs := &http.Server{Handler: s, ReadHeaderTimeout: s.headerTimeout, IdleTimeout: s.idleTimeout}
	hs.RegisterOnShutdown(s.CloseControl)
	return hs
}

// Registry is the Server's own Prometheus registry (served at /metrics).
func (s *Server) Registry() *prometheus.Registry { return s.metrics.registry }

// handler is an API route: it returns the error to send, or nil after it
// wrote its response.
type handler func(w http.ResponseWriter, r *http.Request, id auth.Identity) *apiError

func (s *Server) routes() {
	m := http.NewServeMux()
	m.HandleFunc("GET /v1/health", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, api.Health{OK: true, Service: api.ServiceName})
	})
	m.Handle("GET /metrics", s.authed(s.adminOnly(s.serveMetrics)))
	m.Handle("GET /v1/whoami", s.authed(s.whoami))
	m.Handle("GET /v1/providers/{provider}/readiness", s.authed(s.readiness))

	m.Handle("POST /v1/leases", s.authed(s.createLease))
	m.Handle("GET /v1/leases", s.authed(s.listLeases))
	m.Handle("PUT /v1/leases/{id}", s.authed(s.putLease))
	m.Handle("GET /v1/leases/{id}", s.authed(s.getLease))
	m.Handle("POST /v1/leases/{id}/heartbeat", s.authed(s.heartbeat))
	m.Handle("GET /v1/leases/{id}/terminal", s.authed(s.terminal))
	m.Handle("/v1/leases/{id}/proxy/{port}", s.authed(s.proxyPort))
	m.Handle("/v1/leases/{id}/proxy/{port}/{rest...}", s.authed(s.proxyPort))
	m.Handle("GET /v1/leases/{id}/vnc", s.authed(s.leaseVNC))
	m.Handle("POST /v1/leases/{id}/release", s.authed(s.release))
	m.Handle("POST /v1/leases/{id}/cancel-create", s.authed(s.cancelCreate))
	m.Handle("PUT /v1/leases/{id}/registration", s.authed(s.register))
	m.Handle("GET /v1/leases/{id}/share", s.authed(s.getShare))
	m.Handle("PUT /v1/leases/{id}/share", s.authed(s.putShare))
	m.Handle("DELETE /v1/leases/{id}/share", s.authed(s.deleteShare))
	m.Handle("POST /v1/leases/from-checkpoint", s.authed(s.forkLease))
	m.Handle("PUT /v1/leases/{id}/from-checkpoint", s.authed(s.putForkLease))
	m.Handle("GET /v1/leases/{id}/ssh", s.authed(s.leaseSSH))

	m.Handle("POST /v1/checkpoints", s.authed(s.createCheckpoint))
	m.Handle("GET /v1/checkpoints", s.authed(s.listCheckpoints))
	m.Handle("GET /v1/checkpoints/{id}", s.authed(s.getCheckpoint))
	m.Handle("GET /v1/checkpoints/{id}/events", s.authed(s.checkpointEvents))
	m.Handle("PATCH /v1/checkpoints/{id}/retention", s.authed(s.setRetention))
	m.Handle("POST /v1/checkpoints/{id}/use", s.authed(s.useCheckpoint))
	m.Handle("DELETE /v1/checkpoints/{id}", s.authed(s.deleteCheckpoint))

	m.Handle("POST /v1/runs", s.authed(s.createRun))
	m.Handle("GET /v1/runs", s.authed(s.listRuns))
	m.Handle("GET /v1/runs/{id}", s.authed(s.getRun))
	m.Handle("POST /v1/runs/{id}/events", s.authed(s.appendEvent))
	m.Handle("GET /v1/runs/{id}/events", s.authed(s.listEvents))
	m.Handle("POST /v1/runs/{id}/finish", s.authed(s.finishRun))
	m.Handle("GET /v1/runs/{id}/logs", s.authed(s.runLogs))
	m.Handle("POST /v1/runs/{id}/telemetry", s.authed(s.telemetry))

	m.Handle("GET /v1/usage", s.authed(s.usage))
	m.Handle("GET /v1/control", s.authed(s.controlSocket))

	m.Handle("POST /v1/auth/device", s.unauthed(s.deviceStart))
	m.Handle("POST /v1/auth/device/token", s.unauthed(s.deviceToken))
	m.Handle("POST /v1/auth/github/start", s.unauthed(s.githubLoginStart))
	m.HandleFunc("GET /v1/auth/github/callback", s.githubLoginCallback)
	m.Handle("POST /v1/auth/github/poll", s.unauthed(s.githubLoginPoll))

	m.Handle("GET /v1/tokens", s.authed(s.listTokens))
	m.Handle("POST /v1/tokens/{id}/revoke", s.authed(s.revokeToken))
	m.Handle("POST /v1/tokens/current/revoke", s.authed(s.revokeCurrentToken))
	m.Handle("GET /v1/admin/tokens", s.authed(s.adminOnly(s.adminListTokens)))

	m.Handle("GET /v1/admin/leases", s.authed(s.adminOnly(s.adminListLeases)))
	m.Handle("POST /v1/admin/leases/{id}/release", s.authed(s.adminOnly(s.adminRelease)))
	m.Handle("GET /v1/pool", s.authed(s.adminOnly(s.pool)))
	m.Handle("GET /v1/ready-pools", s.authed(s.adminOnly(s.listReadyPools)))
	m.Handle("GET /v1/ready-pools/{key}", s.authed(s.adminOnly(s.getReadyPool)))
	m.Handle("PUT /v1/ready-pools/{key}", s.authed(s.adminOnly(s.putReadyPool)))
	m.Handle("DELETE /v1/ready-pools/{key}", s.authed(s.adminOnly(s.deleteReadyPool)))
	m.Handle("POST /v1/ready-pools/{key}/reconcile", s.authed(s.adminOnly(s.reconcileReadyPool)))
	s.mux = m
}

// ServeHTTP serves the coordinator API. Every answer is JSON (errors
// included); the request line is validated first (see checkRequestText),
// and an unclean path is routed as its cleaned form instead of being
// redirected.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := s.clock.Now()
	rw := &statusWriter{ResponseWriter: w}
	if r.Body != nil && r.Body != http.NoBody {
		// Deadlines are wall-clock time, whatever s.clock says. A writer
		// without deadlines (a test recorder) has no connection to hold.
		_ = http.NewResponseController(w).SetReadDeadline(time.Now().Add(s.bodyTimeout))
	}
	// The metrics and log labels come from a fixed set: a route pattern of
	// the mux or "other", a known method or "other".
	route := "other"
	if e := checkRequestText(r); e != nil {
		writeError(rw, e)
	} else {
		if p := cleanPath(r.URL.Path); p != r.URL.Path {
			r = r.Clone(r.Context())
			r.URL.Path, r.URL.RawPath = p, ""
		}
		// The mux sets path values only when it serves the request itself.
		var h http.Handler = s.mux
		if _, pattern := s.mux.Handler(r); pattern != "" {
			route = pattern
		} else {
			h = http.HandlerFunc(s.unrouted)
		}
		h.ServeHTTP(rw, r)
	}
	elapsed := s.clock.Since(start)
	method := metricMethod(r.Method)
	s.metrics.observe(method, route, rw.status(), elapsed)
	level := slog.LevelDebug
	if rw.status() >= 500 {
		level = slog.LevelWarn
	}
	s.log.LogAttrs(r.Context(), level, "request",
		slog.String("method", method), slog.String("route", route),
		slog.Int("status", rw.status()), slog.Duration("elapsed", elapsed),
		slog.String("owner", rw.owner))
}

// unrouted answers requests no route matched: 405 when the path exists
// with another method, else 404, both as JSON.
func (s *Server) unrouted(w http.ResponseWriter, r *http.Request) {
	probe := &headerProbe{header: http.Header{}}
	fallback, _ := s.mux.Handler(r)
	fallback.ServeHTTP(probe, r)
	if probe.code == http.StatusMethodNotAllowed {
		w.Header().Set("Allow", probe.header.Get("Allow"))
		writeError(w, errorf(http.StatusMethodNotAllowed, api.CodeMethodNotAllowed, "method %s is not allowed for %s", quote(r.Method), quote(r.URL.Path)))
		return
	}
	writeError(w, notFound("no route %s %s", quote(r.Method), quote(r.URL.Path)))
}

// authed authenticates the request and runs h with its identity.
func (s *Server) authed(h handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		now := s.clock.Now()
		id, err := s.auth.Authenticate(r, now)
		if err != nil {
			if errors.Is(err, auth.ErrInvalidHeader) {
				writeError(w, invalid("%v", err))
				return
			}
			w.Header().Set("WWW-Authenticate", `Bearer realm="crabbox"`)
			writeError(w, errorf(http.StatusUnauthorized, api.CodeUnauthorized, "a valid bearer token is required"))
			return
		}
		if id.TokenID != "" {
			revoked, err := s.revoked(r.Context(), id.TokenID, now)
			if err != nil {
				writeError(w, s.internal(r, "reading revoked tokens", err))
				return
			}
			if revoked {
				w.Header().Set("WWW-Authenticate", `Bearer realm="crabbox"`)
				writeError(w, errorf(http.StatusUnauthorized, api.CodeUnauthorized, "this token was revoked"))
				return
			}
		}
		if sw, ok := w.(*statusWriter); ok {
			sw.owner = id.Owner
		}
		if e := h(w, r, id); e != nil {
			writeError(w, e)
		}
	})
}

func (s *Server) adminOnly(h handler) handler {
	return func(w http.ResponseWriter, r *http.Request, id auth.Identity) *apiError {
		if !id.Admin {
			return forbidden("this route needs admin rights")
		}
		return h(w, r, id)
	}
}

// internal logs err and returns a 500 that says nothing about it.
func (s *Server) internal(r *http.Request, doing string, err error) *apiError {
	s.log.LogAttrs(r.Context(), slog.LevelError, "request failed",
		slog.String("method", metricMethod(r.Method)), slog.String("path", quote(r.URL.Path)),
		slog.String("doing", doing), slog.String("error", err.Error()))
	return errorf(http.StatusInternalServerError, api.CodeInternal, "internal error while %s", doing)
}

// fromStore maps a store error to the wire, treating unknown errors as
// internal.
func (s *Server) fromStore(r *http.Request, err error, doing, what string) *apiError {
	if e := storeError(err, what); e != nil {
		return e
	}
	if errors.Is(err, context.Canceled) && r.Context().Err() != nil {
		return errorf(http.StatusServiceUnavailable, api.CodeUnavailable, "request canceled")
	}
	return s.internal(r, doing, err)
}

func (s *Server) whoami(w http.ResponseWriter, r *http.Request, id auth.Identity) *apiError {
	writeJSON(w, http.StatusOK, api.Whoami{
		Owner: id.Owner, Org: id.Org, Auth: cmp.Or(id.Method, api.AuthBearer),
		Admin: id.Admin, TokenExpiresAt: id.TokenExpiresAt,
	})
	return nil
}

func (s *Server) readiness(w http.ResponseWriter, r *http.Request, _ auth.Identity) *apiError {
	name := strings.ToLower(r.PathValue("provider"))
	out := api.Readiness{Provider: name, Missing: []string{}}
	if _, ok := s.providers[name]; ok {
		out.Configured = true
		out.Message = fmt.Sprintf("provider %q is configured on this coordinator", name)
	} else {
		out.Missing = []string{"provider backend"}
		out.Message = fmt.Sprintf("provider %q is not configured on this coordinator (configured: %s)", name, s.providerNames())
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// wakeMaintenance nudges the maintenance loop without blocking.
func (s *Server) wakeMaintenance() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// statusWriter records the status a handler wrote.
type statusWriter struct {
	http.ResponseWriter
	code  int
	owner string
}

func (w *statusWriter) WriteHeader(code int) {
	if w.code == 0 {
		w.code = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.code == 0 {
		w.code = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

func (w *statusWriter) status() int { return cmp.Or(w.code, http.StatusOK) }

// Unwrap lets http.ResponseController reach the underlying writer.
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// headerProbe captures what the mux's own 404/405 handler would write.
type headerProbe struct {
	header http.Header
	code   int
}

func (p *headerProbe) Header() http.Header         { return p.header }
func (p *headerProbe) Write(b []byte) (int, error) { return len(b), nil }
func (p *headerProbe) WriteHeader(code int)        { p.code = code }
