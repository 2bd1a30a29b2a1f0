// Package api holds the coordinator's wire types: the JSON bodies of every
// route in the coordinator HTTP API, the error codes, the ID formats and the
// lease defaults. Field names and JSON tags are a contract shared with
// existing crabbox clients; change them only additively.
//
// Both the coordinator server and its Go client (coordinator/client) build
// on this package. It has no behaviour beyond validation helpers and the
// expiry rule.
package api

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"time"

	"github.com/crabbox-dev/crabbox/internal/hexid"
	"github.com/crabbox-dev/crabbox/lease"
)

// ServiceName is the "service" value of the health response.
const ServiceName = "crabbox-coordinator"

// ContentTypeJSON is the content type of every JSON body.
const ContentTypeJSON = "application/json; charset=utf-8"

// Header names the coordinator reads besides Authorization.
const (
	// HeaderOwner names the owner an admin token acts as.
	HeaderOwner = "X-Crabbox-Owner"
	// HeaderOrg names the org an admin token acts in.
	HeaderOrg = "X-Crabbox-Org"
)

// Lease defaults and limits.
const (
	DefaultTTLSeconds         = 5400
	DefaultIdleTimeoutSeconds = 1800
	// MaxLeaseSeconds caps both ttlSeconds and idleTimeoutSeconds.
	MaxLeaseSeconds    = 86400
	DefaultSSHPort     = "2222"
	DefaultSSHFallback = "22"
)

// Run limits.
const (
	// MaxEventFieldBytes bounds an event's message and its data.
	MaxEventFieldBytes = 16 << 10
	// MaxLogBytes is how much of a run's log the coordinator keeps (the last
	// bytes).
	MaxLogBytes = 8 << 20
	// LogChunkBytes is the size of one log chunk on the wire.
	LogChunkBytes = 64 << 10
)

// List limits.
const (
	DefaultLeaseListLimit = 100
	MaxLeaseListLimit     = 500
	DefaultRunListLimit   = 50
	DefaultEventListLimit = 500
)

// Lifecycle says who drives a lease's provider: the coordinator (managed) or
// the client that registered it (registered).
type Lifecycle string

// Lifecycles.
const (
	LifecycleManaged    Lifecycle = "managed"
	LifecycleRegistered Lifecycle = "registered"
)

// LeaseState is a lease's state.
type LeaseState string

// Lease states. Provisioning and active leases are live.
const (
	LeaseProvisioning LeaseState = "provisioning"
	LeaseActive       LeaseState = "active"
	LeaseReleased     LeaseState = "released"
	LeaseExpired      LeaseState = "expired"
	LeaseFailed       LeaseState = "failed"
)

// Live reports whether a lease in state s still holds (or may hold) a box.
func (s LeaseState) Live() bool { return s == LeaseProvisioning || s == LeaseActive }

// Target is the operating system of a box.
type Target string

// Targets.
const (
	TargetLinux   Target = "linux"
	TargetMacOS   Target = "macos"
	TargetWindows Target = "windows"
)

// Lease is the lease record the coordinator returns.
type Lease struct {
	ID                 string     `json:"id"`
	Slug               string     `json:"slug,omitempty"`
	Provider           string     `json:"provider"`
	Lifecycle          Lifecycle  `json:"lifecycle"`
	State              LeaseState `json:"state"`
	Owner              string     `json:"owner"`
	Org                string     `json:"org"`
	Target             Target     `json:"target,omitempty"`
	Class              string     `json:"class,omitempty"`
	ServerType         string     `json:"serverType,omitempty"`
	CloudID            string     `json:"cloudID,omitempty"`
	ServerName         string     `json:"serverName,omitempty"`
	Host               string     `json:"host,omitempty"`
	SSHUser            string     `json:"sshUser,omitempty"`
	SSHPort            string     `json:"sshPort,omitempty"`
	SSHFallbackPorts   []string   `json:"sshFallbackPorts,omitempty"`
	SSHHostKey         string     `json:"sshHostKey,omitempty"`
	WorkRoot           string     `json:"workRoot,omitempty"`
	Keep               bool       `json:"keep"`
	TTLSeconds         int        `json:"ttlSeconds"`
	IdleTimeoutSeconds int        `json:"idleTimeoutSeconds"`
	CreatedAt          time.Time  `json:"createdAt"`
	UpdatedAt          time.Time  `json:"updatedAt"`
	LastTouchedAt      time.Time  `json:"lastTouchedAt"`
	ExpiresAt          time.Time  `json:"expiresAt"`
	ReleasedAt         time.Time  `json:"releasedAt,omitzero"`
	EndedAt            time.Time  `json:"endedAt,omitzero"`
	EstimatedHourlyUSD float64    `json:"estimatedHourlyUSD"`
	MaxEstimatedUSD    float64    `json:"maxEstimatedUSD"`
	CleanupAttempts    int        `json:"cleanupAttempts"`
	CleanupError       string     `json:"cleanupError,omitempty"`
	CleanupStartedAt   time.Time  `json:"cleanupStartedAt,omitzero"`
	CleanupRetryAt     time.Time  `json:"cleanupRetryAt,omitzero"`
	// ReleaseDeletesServer is true while deletion of the server is
	// pending, false when the lease ended with its server kept (keep,
	// delete:false, a registered lease), and absent otherwise: existing
	// clients read false as "kept" and keep their local claim.
	ReleaseDeletesServer *bool             `json:"releaseDeletesServer,omitempty"`
	FailureError         string            `json:"failureError,omitempty"`
	Labels               map[string]string `json:"labels,omitempty"`
	// Image is the image the lease asked its provider for (absent: the
	// provider's own default); Location is where (empty: the default).
	Image    *LeaseImage `json:"image,omitempty"`
	Location string      `json:"location,omitempty"`
	// Telemetry is the latest host sample a heartbeat carried (a JSON
	// object), received at TelemetryAt.
	Telemetry   json.RawMessage `json:"telemetry,omitempty"`
	TelemetryAt time.Time       `json:"telemetryAt,omitzero"`
	// Pool is the ready pool the box was taken from, if any.
	Pool string `json:"pool,omitempty"`
	// SSHLoginExpiresAt is set when host, sshUser and sshPort are a
	// short-lived login issued for this answer (a provider whose SSH
	// user is an access token): when that login stops working. Such a
	// login is only ever sent to the lease's owner, on the answers that
	// connect (create, get, heartbeat), and is never stored; listings
	// show the lease's neutral user.
	SSHLoginExpiresAt time.Time `json:"sshLoginExpiresAt,omitzero"`
	// Share is who else may reach the lease; only its owner, a manager
	// and admins are shown it.
	Share *LeaseShare `json:"share,omitempty"`
	// Access is what the caller may do with the lease: AccessOwner
	// (its owner, or an admin) or the ShareRole a share grants.
	Access string `json:"access,omitempty"`
	// AccessKey is the coordinator's own public key for this lease
	// (authorized_keys form), sent to the owner only: a client that
	// installs it on the box next to the lease key lets the coordinator
	// reach the box for the terminal, previews, the desktop and shared
	// users. Absent when the coordinator has no secret to derive it.
	AccessKey string `json:"accessKey,omitempty"`
}

// AccessOwner is Lease.Access for the lease's owner (or an admin).
const AccessOwner = "owner"

// Image sources: where a lease's image came from.
const (
	// ImageExplicit: the lease request named the image.
	ImageExplicit = "explicit"
	// ImageProviderDefault: the provider's configured default image.
	ImageProviderDefault = "provider-default"
)

// LeaseImage identifies a lease's image on the wire. Existing clients
// decode it as this object, never as a string.
type LeaseImage struct {
	ID     string `json:"id"`
	Source string `json:"source"`
	// Provider is the lease's provider.
	Provider string `json:"provider,omitempty"`
	// Region is the lease's location, when it asked for one.
	Region string `json:"region,omitempty"`
}

// UnmarshalJSON reads the object, and also the bare image ID that
// coordinators before LeaseImage sent (its source is then explicit).
func (i *LeaseImage) UnmarshalJSON(b []byte) error {
	var id string
	if json.Unmarshal(b, &id) == nil {
		*i = LeaseImage{ID: id, Source: ImageExplicit}
		return nil
	}
	type plain LeaseImage
	return json.Unmarshal(b, (*plain)(i))
}

// ImageRef is the image a lease request asks for: its ID. On the wire it
// is either that ID as a string, as existing clients send it, or a
// LeaseImage object, of which only "id" is read (the coordinator decides
// the rest). It is always sent as the string.
type ImageRef string

// UnmarshalJSON accepts the string or the object form.
func (r *ImageRef) UnmarshalJSON(b []byte) error {
	var id string
	if json.Unmarshal(b, &id) == nil {
		*r = ImageRef(id)
		return nil
	}
	var obj struct {
		ID *string `json:"id"`
	}
	if b[0] != '{' || json.Unmarshal(b, &obj) != nil || obj.ID == nil || *obj.ID == "" {
		return fmt.Errorf("field %q: want an image ID (a string) or an object with a non-empty string \"id\", got %s", "image", jsonValueKind(b))
	}
	*r = ImageRef(*obj.ID)
	return nil
}

// jsonValueKind names the kind of a JSON value for an error message.
func jsonValueKind(b []byte) string {
	switch b[0] {
	case '{':
		return "an object without one"
	case '[':
		return "an array"
	case 't', 'f':
		return "a boolean"
	case 'n':
		return "null"
	}
	return "a number"
}

// TTL is the lease's time to live.
func (l Lease) TTL() time.Duration { return time.Duration(l.TTLSeconds) * time.Second }

// IdleTimeout is the lease's idle timeout.
func (l Lease) IdleTimeout() time.Duration { return time.Duration(l.IdleTimeoutSeconds) * time.Second }

// ComputeExpiresAt returns when a lease expires: for managed leases
// min(createdAt+ttl, lastTouchedAt+idle), for registered leases
// lastTouchedAt+min(ttl, idle).
func ComputeExpiresAt(lc Lifecycle, createdAt, lastTouchedAt time.Time, ttlSeconds, idleTimeoutSeconds int) time.Time {
	ttl := time.Duration(ttlSeconds) * time.Second
	idle := time.Duration(idleTimeoutSeconds) * time.Second
	if lc == LifecycleRegistered {
		return lastTouchedAt.Add(min(ttl, idle)).UTC()
	}
	return lease.ExpiresAt(createdAt, lastTouchedAt, ttl, idle).UTC()
}

// ClampSeconds applies a lease duration default and the 86400 s cap: a
// value <= 0 becomes def.
func ClampSeconds(v, def int) int {
	if v <= 0 {
		return def
	}
	return min(v, MaxLeaseSeconds)
}

// LeaseRequest is the body of POST /v1/leases and PUT /v1/leases/{id}
// (without createAttemptID) and of PUT /v1/leases/{id}/registration.
type LeaseRequest struct {
	LeaseID            string            `json:"leaseID,omitempty"`
	CreateAttemptID    string            `json:"createAttemptID,omitempty"`
	Slug               string            `json:"slug,omitempty"`
	Provider           string            `json:"provider,omitempty"`
	Target             Target            `json:"target,omitempty"`
	Class              string            `json:"class,omitempty"`
	ServerType         string            `json:"serverType,omitempty"`
	Location           string            `json:"location,omitempty"`
	Image              ImageRef          `json:"image,omitempty"`
	SSHUser            string            `json:"sshUser,omitempty"`
	SSHPort            string            `json:"sshPort,omitempty"`
	SSHFallbackPorts   []string          `json:"sshFallbackPorts,omitempty"`
	SSHPublicKey       string            `json:"sshPublicKey"`
	WorkRoot           string            `json:"workRoot,omitempty"`
	TTLSeconds         int               `json:"ttlSeconds,omitempty"`
	IdleTimeoutSeconds int               `json:"idleTimeoutSeconds,omitempty"`
	Keep               bool              `json:"keep,omitempty"`
	Labels             map[string]string `json:"labels,omitempty"`
	// Pool names a ready pool to take a box from (see ReadyPoolSpec), or
	// is PoolAny: any pool the request matches. A box taken from a pool
	// keeps its own lease ID, which the answer names. A request that
	// names no pool takes from one it matches only without a LeaseID;
	// a fixed-ID create (PUT) never takes from a pool.
	Pool string `json:"pool,omitempty"`
}

// RegistrationRequest is the body of PUT /v1/leases/{id}/registration: a
// direct provider's lease recorded with the coordinator. The coordinator
// never calls a provider for a registered lease.
type RegistrationRequest struct {
	Slug               string            `json:"slug,omitempty"`
	Provider           string            `json:"provider"`
	Target             Target            `json:"target,omitempty"`
	Class              string            `json:"class,omitempty"`
	ServerType         string            `json:"serverType,omitempty"`
	CloudID            string            `json:"cloudID,omitempty"`
	ServerName         string            `json:"serverName,omitempty"`
	Host               string            `json:"host,omitempty"`
	SSHUser            string            `json:"sshUser,omitempty"`
	SSHPort            string            `json:"sshPort,omitempty"`
	SSHFallbackPorts   []string          `json:"sshFallbackPorts,omitempty"`
	SSHHostKey         string            `json:"sshHostKey,omitempty"`
	WorkRoot           string            `json:"workRoot,omitempty"`
	TTLSeconds         int               `json:"ttlSeconds,omitempty"`
	IdleTimeoutSeconds int               `json:"idleTimeoutSeconds,omitempty"`
	Keep               bool              `json:"keep,omitempty"`
	Labels             map[string]string `json:"labels,omitempty"`
}

// MaxTelemetryBytes bounds a heartbeat's telemetry sample.
const MaxTelemetryBytes = 4 << 10

// HeartbeatRequest is the body of POST /v1/leases/{id}/heartbeat.
type HeartbeatRequest struct {
	ExpectedProvider string `json:"expectedProvider,omitempty"`
	// IdleTimeoutSeconds, when positive, replaces the lease's idle timeout
	// (clamped to 86400).
	IdleTimeoutSeconds int `json:"idleTimeoutSeconds,omitempty"`
	// Telemetry is an optional host sample (a JSON object of at most
	// MaxTelemetryBytes); the lease keeps the latest one.
	Telemetry json.RawMessage `json:"telemetry,omitempty"`
}

// ReleaseRequest is the body of POST /v1/leases/{id}/release.
type ReleaseRequest struct {
	// Delete says whether to delete the server; nil means !keep.
	Delete           *bool  `json:"delete,omitempty"`
	ExpectedProvider string `json:"expectedProvider,omitempty"`
}

// CancelCreateRequest is the body of POST /v1/leases/{id}/cancel-create.
type CancelCreateRequest struct {
	CreateAttemptID string `json:"createAttemptID"`
}

// CanceledCreate records a canceled create attempt.
type CanceledCreate struct {
	Version          int    `json:"version"`
	RequestedLeaseID string `json:"requestedLeaseID"`
	CreateAttemptID  string `json:"createAttemptID"`
	// State is always "canceled".
	State string `json:"state"`
}

// CanceledState is the state of a CanceledCreate.
const CanceledState = "canceled"

// CancelCreateResponse answers POST /v1/leases/{id}/cancel-create. Lease is
// set when the attempt had created a lease (now released).
type CancelCreateResponse struct {
	CanceledCreate CanceledCreate `json:"canceledCreate"`
	Lease          *Lease         `json:"lease,omitempty"`
}

// LeaseResponse wraps one lease.
type LeaseResponse struct {
	Lease Lease `json:"lease"`
}

// LeasesResponse wraps a list of leases.
type LeasesResponse struct {
	Leases []Lease `json:"leases"`
}

// RunState is a run's state.
type RunState string

// Run states.
const (
	RunRunning   RunState = "running"
	RunSucceeded RunState = "succeeded"
	RunFailed    RunState = "failed"
)

// RunResults is a run's test summary (JUnit counts).
type RunResults struct {
	Tests    int `json:"tests"`
	Failures int `json:"failures"`
	Errors   int `json:"errors"`
	Skipped  int `json:"skipped"`
}

// Run is the run record.
type Run struct {
	ID           string      `json:"id"`
	LeaseID      string      `json:"leaseID,omitempty"`
	Slug         string      `json:"slug,omitempty"`
	Owner        string      `json:"owner"`
	Org          string      `json:"org"`
	Provider     string      `json:"provider"`
	Target       Target      `json:"target,omitempty"`
	Class        string      `json:"class,omitempty"`
	ServerType   string      `json:"serverType,omitempty"`
	Command      []string    `json:"command"`
	Label        string      `json:"label,omitempty"`
	State        RunState    `json:"state"`
	Phase        string      `json:"phase,omitempty"`
	ExitCode     *int        `json:"exitCode,omitempty"`
	SyncMs       int64       `json:"syncMs"`
	CommandMs    int64       `json:"commandMs"`
	DurationMs   int64       `json:"durationMs"`
	LogBytes     int64       `json:"logBytes"`
	LogTruncated bool        `json:"logTruncated"`
	Results      *RunResults `json:"results,omitempty"`
	StartedAt    time.Time   `json:"startedAt"`
	LastEventAt  time.Time   `json:"lastEventAt,omitzero"`
	EventCount   int         `json:"eventCount"`
	EndedAt      time.Time   `json:"endedAt,omitzero"`
	// Telemetry is the latest sample posted to /v1/runs/{id}/telemetry,
	// as the client sent it.
	Telemetry json.RawMessage `json:"telemetry,omitempty"`
}

// RunRequest is the body of POST /v1/runs.
type RunRequest struct {
	LeaseID    string   `json:"leaseID,omitempty"`
	Provider   string   `json:"provider"`
	Target     Target   `json:"target,omitempty"`
	Class      string   `json:"class,omitempty"`
	ServerType string   `json:"serverType,omitempty"`
	Command    []string `json:"command"`
	Label      string   `json:"label,omitempty"`
}

// Event types a client sends.
const (
	EventPhase   = "phase"   // a phase started: Phase names it
	EventOutput  = "output"  // a chunk of stdout or stderr: Stream names it
	EventCommand = "command" // the command started or finished
	EventLease   = "lease"   // lease acquired or released
	EventError   = "error"   // crabbox itself failed: Message says how
)

// Phases of a run.
const (
	PhaseLeasing   = "leasing"
	PhaseBootstrap = "bootstrap"
	PhaseSync      = "sync"
	PhaseCommand   = "command"
	PhaseRelease   = "release"
	PhaseFinished  = "finished"
)

// Streams of output events.
const (
	StreamStdout = "stdout"
	StreamStderr = "stderr"
)

// Event types existing clients send that change the run.
const (
	// EventRunFailed ends a run as failed without a finish (a run that
	// failed before its command started).
	EventRunFailed = "run.failed"
	// EventLeaseCreated ties a fresh run to its lease (via the lease
	// fields of the event).
	EventLeaseCreated = "lease.created"
	// EventLeaseReleased is posted after the run finished.
	EventLeaseReleased = "lease.released"
)

// EventRequest is the body of POST /v1/runs/{id}/events. Data is a string
// (JSON-encoded by the client when structured). The lease fields, when
// set, are applied to the run.
type EventRequest struct {
	Type        string `json:"type"`
	Phase       string `json:"phase,omitempty"`
	Stream      string `json:"stream,omitempty"`
	Message     string `json:"message,omitempty"`
	Data        string `json:"data,omitempty"`
	LeaseID     string `json:"leaseID,omitempty"`
	Slug        string `json:"slug,omitempty"`
	Provider    string `json:"provider,omitempty"`
	Target      Target `json:"target,omitempty"`
	WindowsMode string `json:"windowsMode,omitempty"`
	Class       string `json:"class,omitempty"`
	ServerType  string `json:"serverType,omitempty"`
	ExitCode    *int   `json:"exitCode,omitempty"`
}

// Event is a stored run event. Seq counts from 1 without gaps.
type Event struct {
	RunID     string    `json:"runID"`
	Seq       int64     `json:"seq"`
	Type      string    `json:"type"`
	Phase     string    `json:"phase,omitempty"`
	Stream    string    `json:"stream,omitempty"`
	Message   string    `json:"message,omitempty"`
	Data      string    `json:"data,omitempty"`
	CreatedAt time.Time `json:"createdAt"`
}

// FinishRequest is the body of POST /v1/runs/{id}/finish. ExitCode 0 makes
// the run succeeded, anything else failed. Log is the run's output; the
// coordinator keeps its last MaxLogBytes.
type FinishRequest struct {
	ExitCode  int    `json:"exitCode"`
	SyncMs    int64  `json:"syncMs"`
	CommandMs int64  `json:"commandMs"`
	Log       string `json:"log" edge:"bytes"` // stored as bytes: any content
	// LogChunks, when present, is the whole log in pieces and replaces
	// Log: existing clients send the log's last 64 KiB as Log and all of
	// it as chunks of at most 64 KiB.
	LogChunks    []string    `json:"logChunks,omitempty" edge:"bytes"`
	LogTruncated bool        `json:"logTruncated"`
	Results      *RunResults `json:"results,omitempty"`
}

// RunResponse wraps one run.
type RunResponse struct {
	Run Run `json:"run"`
}

// RunsResponse wraps a list of runs.
type RunsResponse struct {
	Runs []Run `json:"runs"`
}

// EventResponse wraps one event.
type EventResponse struct {
	Event Event `json:"event"`
}

// EventsResponse wraps a list of events.
type EventsResponse struct {
	Events []Event `json:"events"`
}

// Usage scopes.
const (
	ScopeUser = "user"
	ScopeOrg  = "org"
	ScopeAll  = "all"
)

// UsageTotals are the usage figures of a set of leases.
type UsageTotals struct {
	Leases         int     `json:"leases"`
	ActiveLeases   int     `json:"activeLeases"`
	RuntimeSeconds int64   `json:"runtimeSeconds"`
	EstimatedUSD   float64 `json:"estimatedUSD"`
	ReservedUSD    float64 `json:"reservedUSD"`
	// Checkpoints counts the native checkpoints that stored an artifact
	// in the month; CheckpointStorageUSD is what their storage cost in it
	// so far (also counted in ReservedUSD).
	Checkpoints          int     `json:"checkpoints,omitempty"`
	CheckpointStorageUSD float64 `json:"checkpointStorageUSD,omitempty"`
}

// UsageGroup is usage for one key (an owner, org, provider or server type).
type UsageGroup struct {
	Key string `json:"key"`
	UsageTotals
}

// Usage is a month's usage in a scope: the totals flat in the object,
// then the groups. Registered leases are excluded.
type Usage struct {
	Scope string `json:"scope"`
	Month string `json:"month"`
	Owner string `json:"owner,omitempty"`
	Org   string `json:"org,omitempty"`
	UsageTotals
	ByOwner      []UsageGroup `json:"byOwner"`
	ByOrg        []UsageGroup `json:"byOrg"`
	ByProvider   []UsageGroup `json:"byProvider"`
	ByServerType []UsageGroup `json:"byServerType"`
}

// Limits are the configured maxima; 0 means unlimited.
type Limits struct {
	MaxActiveLeases         int     `json:"maxActiveLeases"`
	MaxActiveLeasesPerOwner int     `json:"maxActiveLeasesPerOwner"`
	MaxActiveLeasesPerOrg   int     `json:"maxActiveLeasesPerOrg"`
	MaxMonthlyUSD           float64 `json:"maxMonthlyUSD"`
	MaxMonthlyUSDPerOwner   float64 `json:"maxMonthlyUSDPerOwner"`
	MaxMonthlyUSDPerOrg     float64 `json:"maxMonthlyUSDPerOrg"`
}

// UsageResponse answers GET /v1/usage.
type UsageResponse struct {
	Usage  Usage  `json:"usage"`
	Limits Limits `json:"limits"`
}

// PoolProvider is one configured provider in the pool view.
type PoolProvider struct {
	Provider           string `json:"provider"`
	ActiveLeases       int    `json:"activeLeases"`
	ProvisioningLeases int    `json:"provisioningLeases"`
	// PendingDeletes counts ended leases whose server deletion is queued.
	PendingDeletes int `json:"pendingDeletes"`
}

// PoolMachine is the box of one managed lease holding capacity, in the
// shape existing clients list (their `list --all` and doctor read it).
type PoolMachine struct {
	// ID is the box's cloud ID, or the lease ID while it has none.
	ID       string `json:"id"`
	Provider string `json:"provider"`
	CloudID  string `json:"cloudID"`
	Name     string `json:"name"`
	// Status is the lease's state.
	Status     string `json:"status"`
	ServerType string `json:"serverType"`
	Host       string `json:"host"`
	// Labels are the lease's labels plus lease, slug, owner and org.
	Labels map[string]string `json:"labels"`
}

// PoolResponse answers GET /v1/pool (admin only): the boxes of the
// managed leases holding capacity, of every owner, as machines; the
// configured providers; and those leases.
type PoolResponse struct {
	Machines  []PoolMachine  `json:"machines"`
	Providers []PoolProvider `json:"providers"`
	Leases    []Lease        `json:"leases"`
}

// Auth kinds in a whoami response.
const (
	AuthBearer = "bearer"
	AuthGitHub = "github"
	AuthProxy  = "proxy"
)

// Whoami answers GET /v1/whoami.
type Whoami struct {
	Owner          string    `json:"owner"`
	Org            string    `json:"org"`
	Auth           string    `json:"auth"`
	Admin          bool      `json:"admin"`
	TokenExpiresAt time.Time `json:"tokenExpiresAt,omitzero"`
}

// DeviceStart answers POST /v1/auth/device: the user enters UserCode at
// VerificationURI; the client polls POST /v1/auth/device/token with
// DeviceCode every IntervalSeconds until ExpiresAt.
type DeviceStart struct {
	DeviceCode      string    `json:"deviceCode"`
	UserCode        string    `json:"userCode"`
	VerificationURI string    `json:"verificationURI"`
	ExpiresAt       time.Time `json:"expiresAt,omitzero"`
	IntervalSeconds int       `json:"interval"`
}

// DeviceTokenRequest is the body of POST /v1/auth/device/token.
type DeviceTokenRequest struct {
	DeviceCode string `json:"deviceCode"`
}

// Statuses of a device sign-in not finished yet (202 DevicePending).
const (
	DevicePendingStatus  = "pending"   // poll again after the interval
	DeviceSlowDownStatus = "slow_down" // poll again, 5 s slower from now on
)

// DevicePending answers a device poll before the user finished (202).
type DevicePending struct {
	Status string `json:"status"`
}

// DeviceToken answers a device poll once the user signed in (200): a
// crabbox user token for them.
type DeviceToken struct {
	Token     string    `json:"token"`
	Owner     string    `json:"owner"`
	Org       string    `json:"org"`
	Login     string    `json:"login"`
	ExpiresAt time.Time `json:"expiresAt"`
}

// GitHubLoginStartRequest is the body of POST /v1/auth/github/start, the
// browser sign-in of the upstream crabbox CLI: PollSecretHash is the
// lowercase hex SHA-256 of a secret only the client knows (it proves
// itself with that secret when polling); LoopbackRedirectURI is where the
// browser is sent back to after GitHub (http://127.0.0.1:PORT/crabbox/oauth/
// followed by 64 hex digits). Provider is accepted and echoed, not used.
type GitHubLoginStartRequest struct {
	PollSecretHash      string `json:"pollSecretHash"`
	LoopbackRedirectURI string `json:"loopbackRedirectURI"`
	Provider            string `json:"provider,omitempty"`
}

// GitHubLoginStart answers POST /v1/auth/github/start: the client sends
// the user's browser to URL (GitHub's authorize page) and polls with
// LoginID until ExpiresAt (RFC 3339).
type GitHubLoginStart struct {
	LoginID   string `json:"loginID"`
	URL       string `json:"url"`
	ExpiresAt string `json:"expiresAt"`
}

// GitHubLoginPollRequest is the body of POST /v1/auth/github/poll.
// BrowserConfirmation is what the coordinator's callback sent to the
// loopback address ("confirm_" and 32 hex digits), once the client got it.
type GitHubLoginPollRequest struct {
	LoginID             string `json:"loginID"`
	PollSecret          string `json:"pollSecret"`
	BrowserConfirmation string `json:"browserConfirmation,omitempty"`
}

// Statuses of a browser sign-in (GitHubLoginPoll.Status).
const (
	GitHubLoginPending              = "pending"               // 200: the user has not finished at GitHub
	GitHubLoginConfirmationRequired = "confirmation_required" // 200: done; poll again with the browser confirmation
	GitHubLoginComplete             = "complete"              // 200: Token is the user's
	GitHubLoginFailed               = "failed"                // 403 or 502: Error and Message say why
	GitHubLoginExpired              = "expired"               // 410: unknown, expired or already collected
)

// GitHubLoginPoll answers POST /v1/auth/github/poll. On an error status it
// is also an error body (Error is the code, Message the reason).
type GitHubLoginPoll struct {
	Status         string `json:"status"`
	Token          string `json:"token,omitempty"`
	Owner          string `json:"owner,omitempty"`
	Org            string `json:"org,omitempty"`
	Login          string `json:"login,omitempty"`
	Provider       string `json:"provider,omitempty"`
	TokenExpiresAt string `json:"tokenExpiresAt,omitempty"`
	ExpiresAt      string `json:"expiresAt,omitempty"`
	Error          string `json:"error,omitempty"`
	Message        string `json:"message,omitempty"`
}

// Token is one entry of the coordinator's token registry: a user token
// it issued (never the token itself), or, with no owner, a revoked ID it
// never issued (a token minted offline).
type Token struct {
	ID        string    `json:"id"`
	Owner     string    `json:"owner"`
	Org       string    `json:"org"`
	Login     string    `json:"login,omitempty"`
	Source    string    `json:"source,omitempty"`
	CreatedAt time.Time `json:"createdAt,omitzero"`
	ExpiresAt time.Time `json:"expiresAt,omitzero"`
	Revoked   bool      `json:"revoked"`
	RevokedAt time.Time `json:"revokedAt,omitzero"`
	RevokedBy string    `json:"revokedBy,omitempty"`
	// Current is true for the token the request authenticated with.
	Current bool `json:"current,omitempty"`
}

// TokensResponse answers GET /v1/tokens and GET /v1/admin/tokens.
type TokensResponse struct {
	Tokens []Token `json:"tokens"`
}

// TokenResponse answers POST /v1/tokens/{id}/revoke.
type TokenResponse struct {
	Token Token `json:"token"`
}

// Health answers GET /v1/health.
type Health struct {
	OK      bool   `json:"ok"`
	Service string `json:"service"`
}

// Readiness answers GET /v1/providers/{p}/readiness.
type Readiness struct {
	Provider   string   `json:"provider"`
	Configured bool     `json:"configured"`
	Missing    []string `json:"missing"`
	Message    string   `json:"message"`
}

// Error codes in an error body.
const (
	CodeInvalidRequest           = "invalid_request"            // 400
	CodeUnauthorized             = "unauthorized"               // 401
	CodeForbidden                = "forbidden"                  // 403
	CodeNotFound                 = "not_found"                  // 404
	CodeMethodNotAllowed         = "method_not_allowed"         // 405
	CodeRequestTimeout           = "request_timeout"            // 408
	CodeRequestTooLarge          = "request_too_large"          // 413
	CodeProviderNotConfigured    = "provider_not_configured"    // 424
	CodeCostLimitExceeded        = "cost_limit_exceeded"        // 429
	CodeTooManyRequests          = "too_many_requests"          // 429, a busy unauthenticated route
	CodeInternal                 = "internal_error"             // 500
	CodeProviderFailed           = "provider_failed"            // 502
	CodeUnavailable              = "unavailable"                // 503
	CodeLeaseStateChanged        = "lease_state_changed"        // 409, with lease
	CodeCreateAttemptConflict    = "create_attempt_conflict"    // 409
	CodeLeaseIDConflict          = "lease_id_conflict"          // 409
	CodeCreateCanceled           = "create_canceled"            // 409
	CodeLeaseExpired             = "lease_expired"              // 409
	CodeLeaseEnded               = "lease_ended"                // 409
	CodeProviderIdentityMismatch = "provider_identity_mismatch" // 409
	CodeRunFinished              = "run_finished"               // 409
	CodeDeviceExpired            = "device_code_expired"        // 410
	CodeDeviceCodeRejected       = "device_code_rejected"       // 400, GitHub does not know the device code
	CodeTokenNotRevocable        = "token_not_revocable"        // 400, a static token revoking itself
	CodeGitHubLoginExpired       = "github_login_expired"       // 410, a browser sign-in unknown, expired or collected
	CodeUpstream                 = "upstream_failed"            // 502, GitHub did not answer
)

// Error is the body of every error response. Lease is set where a code
// carries the lease (lease_state_changed).
type Error struct {
	Code    string `json:"error"`
	Message string `json:"message"`
	Lease   *Lease `json:"lease,omitempty"`
}

// MaxSlugLen is the longest slug.
const MaxSlugLen = 41

// IsLeaseID reports whether s is a managed lease ID: cbx_ and 12 lowercase
// hex digits.
func IsLeaseID(s string) bool { return lease.IsID(s) }

// IsRegisteredLeaseID reports whether s can name a registered lease.
// (A letter or digit, then 2 to 127 letters, digits, '_', '.', ':' or
// '-'.) The ID checks are plain loops, not regexps: every crabbox command
// links this package, and compiling regexps at start cost it 0.4 ms.
func IsRegisteredLeaseID(s string) bool {
	if len(s) < 3 || len(s) > 128 || !isAlnum(s[0]) {
		return false
	}
	for i := 1; i < len(s); i++ {
		if c := s[i]; !isAlnum(c) && c != '_' && c != '.' && c != ':' && c != '-' {
			return false
		}
	}
	return true
}

func isAlnum(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}

// IsCreateAttemptID reports whether s is a create attempt ID: cat_ and 32
// lowercase hex digits.
func IsCreateAttemptID(s string) bool { return hexid.Valid(s, "cat_", 32) }

// IsRunID reports whether s is a run ID: run_ and 12 lowercase hex digits.
func IsRunID(s string) bool { return lease.IsRunID(s) }

// IsSlug reports whether s is a well-formed slug: lowercase [a-z0-9-], at
// most 41 characters.
func IsSlug(s string) bool { return lease.ValidSlug(s) }

// NewCreateAttemptID returns a fresh create attempt ID.
func NewCreateAttemptID() string { return "cat_" + randomHex(16) }

// NewRunID returns a fresh run ID.
func NewRunID() string { return lease.NewRunID() }

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b) // crypto/rand.Read never returns an error
	return hex.EncodeToString(b)
}
