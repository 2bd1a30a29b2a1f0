// Package store is the coordinator's durable state: leases, create attempts
// (including cancel tombstones), runs, run events and run logs, behind one
// interface, Store.
//
// Every method that changes state runs as one database transaction and
// enforces the lease rules itself (replay and conflict of creates, limits,
// expiry, fencing of cleanup claims), so the HTTP layer stays thin and two
// coordinator processes sharing one database cannot race each other into an
// inconsistent state. Methods never call providers: provider work happens
// between calls (for example between ClaimForCleanup and FinishCleanup) and
// is fenced by a token.
//
// Time is always passed in by the caller (a "now" argument or field), so
// tests drive it with a fake clock and nothing here reads the wall clock.
// Zero time.Time values mean "unset" (for example ReleasedAt of a live lease).
//
// Implementations: package store/sqlite (embedded default, pure Go) and
// package store/postgres (several coordinator replicas). Package
// store/storetest is the conformance suite both pass.
package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// Lifecycle says who manages a lease's machine.
type Lifecycle string

const (
	// LifecycleManaged: the coordinator provisioned the machine and deletes it.
	LifecycleManaged Lifecycle = "managed"
	// LifecycleRegistered: the machine was made elsewhere and only recorded
	// here; release and expiry never call a provider for it.
	LifecycleRegistered Lifecycle = "registered"
)

// LeaseState is where a lease is in its life.
type LeaseState string

const (
	StateProvisioning LeaseState = "provisioning"
	StateActive       LeaseState = "active"
	StateReleased     LeaseState = "released"
	StateExpired      LeaseState = "expired"
	StateFailed       LeaseState = "failed"
)

// Live reports whether a lease in state s is still in use (provisioning or
// active). Released, expired and failed leases have ended.
func (s LeaseState) Live() bool { return s == StateProvisioning || s == StateActive }

// Valid reports whether s is one of the known states.
func (s LeaseState) Valid() bool {
	switch s {
	case StateProvisioning, StateActive, StateReleased, StateExpired, StateFailed:
		return true
	}
	return false
}

// Lease is one lease record: every field of the wire contract's "Lease
// record" plus private fields that never leave the coordinator.
type Lease struct {
	ID        string
	Slug      string
	Provider  string
	Lifecycle Lifecycle
	State     LeaseState
	Owner     string
	Org       string

	Target     string
	Class      string
	ServerType string
	Image      string
	// ImageSource is where Image came from: "explicit" (the request named
	// it) or "provider-default"; empty in leases stored before it was
	// recorded.
	ImageSource      string
	Location         string
	CloudID          string
	ServerName       string
	Host             string
	SSHUser          string
	SSHPort          string
	SSHFallbackPorts []string
	SSHHostKey       string
	WorkRoot         string
	Keep             bool

	TTLSeconds         int64
	IdleTimeoutSeconds int64
	CreatedAt          time.Time
	UpdatedAt          time.Time // set by the store on every write
	LastTouchedAt      time.Time
	ExpiresAt          time.Time // computed by the store, see ExpiresAt
	ReleasedAt         time.Time
	EndedAt            time.Time

	EstimatedHourlyUSD float64
	// MaxEstimatedUSD is what the lease reserves against monthly limits:
	// EstimatedHourlyUSD * TTLSeconds / 3600. The caller sets it.
	MaxEstimatedUSD float64

	CleanupAttempts int
	CleanupError    string
	// CleanupStartedAt is when deletion of the server was queued (release)
	// or first claimed (expiry). Cleared when cleanup finishes.
	CleanupStartedAt time.Time
	// CleanupRetryAt is the earliest time a failed cleanup is claimed again.
	CleanupRetryAt time.Time
	// ReleaseDeletesServer is true while deletion of the server is queued
	// and not finished. Such a lease still counts against active limits.
	ReleaseDeletesServer bool
	// ServerKept is true when the lease ended with its server deliberately
	// left running (released with keep or without deletion).
	ServerKept   bool
	FailureError string
	Labels       map[string]string
	// Telemetry is the latest host sample a heartbeat carried (a JSON
	// object, at most MaxTelemetryBytes), received at TelemetryAt; nil
	// when none came yet.
	Telemetry   json.RawMessage
	TelemetryAt time.Time

	// Pool is the key of the ready pool that made the box (kept after the
	// take); empty for a box made for its owner. PoolTakenAt is when the
	// box was handed to its owner: zero while it is an idle pool box.
	Pool        string
	PoolTakenAt time.Time

	// Share is who else may reach the lease (empty: nobody). It is set
	// only through SetLeaseShare.
	Share LeaseShare

	// Private fields: never serialise these into API responses.

	// CreateAttemptID is the create attempt bound to this lease by
	// CreateLease (empty for PutLease and registrations).
	CreateAttemptID string
	// RequestHash is the fixed-ID PUT request fingerprint given to PutLease.
	RequestHash string
	// CleanupToken is the fencing token of the current cleanup claim
	// (empty when none), handed out by ClaimForCleanup.
	CleanupToken string
}

// HoldsCapacity reports whether the lease counts against active-lease
// limits: it is live, or its server deletion is queued and not finished.
// Live leases count until their cleanup commits, even past ExpiresAt.
// Registered leases never count.
func (l Lease) HoldsCapacity() bool {
	return l.Lifecycle != LifecycleRegistered && (l.State.Live() || l.ReleaseDeletesServer)
}

// ExpiresAt computes a lease's expiry: for managed leases
// min(created+ttl, lastTouched+idle), for registered ones
// lastTouched+min(ttl, idle).
func ExpiresAt(lc Lifecycle, created, lastTouched time.Time, ttlSeconds, idleSeconds int64) time.Time {
	ttl := time.Duration(ttlSeconds) * time.Second
	idle := time.Duration(idleSeconds) * time.Second
	if lc == LifecycleRegistered {
		return lastTouched.Add(min(ttl, idle))
	}
	byTTL, byIdle := created.Add(ttl), lastTouched.Add(idle)
	if byIdle.Before(byTTL) {
		return byIdle
	}
	return byTTL
}

// Limits are the configured maxima checked when a managed lease is
// created. Zero means unlimited. Active leases are those that hold
// capacity (see Lease.HoldsCapacity); per-owner limits count the owner's
// leases in every org. Monthly limits compare the month's reservations
// (see MonthlyReservedUSD) plus the new lease's MaxEstimatedUSD with the
// maximum.
type Limits struct {
	MaxActiveLeases         int
	MaxActiveLeasesPerOwner int
	MaxActiveLeasesPerOrg   int
	MaxMonthlyUSD           float64
	MaxMonthlyUSDPerOwner   float64
	MaxMonthlyUSDPerOrg     float64
}

// CreateRequest asks CreateLease or PutLease for a new lease.
type CreateRequest struct {
	// Lease is the new record. The caller fills ID, Owner, Org, Provider,
	// Lifecycle (managed), State (normally provisioning), the request
	// fields, CreatedAt, LastTouchedAt, TTL/idle and the cost estimate.
	// The store computes ExpiresAt and UpdatedAt and sets the private
	// fields from AttemptID/RequestHash.
	Lease Lease
	// AttemptID is the create-attempt token (CreateLease only, required).
	AttemptID string
	// RequestHash fingerprints the normalised fixed-ID request (PutLease
	// only, required): an identical request replays, a different one
	// conflicts.
	RequestHash string
	// Limits are checked in the same transaction as the insert.
	Limits Limits
	// Now is the time of the request; it picks the month for monthly limits.
	Now time.Time
}

// CreateResult is the outcome of CreateLease or PutLease.
type CreateResult struct {
	Lease Lease
	// Replayed is true when the request matched an existing lease and
	// nothing was created.
	Replayed bool
}

// CancelResult is the outcome of CancelCreate.
type CancelResult struct {
	// Lease is the lease bound to the attempt, after its release, or nil
	// when the attempt was never bound (a tombstone was written).
	Lease *Lease
}

// ReleaseRequest asks Release to end a lease.
type ReleaseRequest struct {
	// DeleteServer queues deletion of a managed lease's server; ignored for
	// registered leases.
	DeleteServer bool
	// ExpectedProvider, when set, must equal the lease's provider.
	ExpectedProvider string
	Now              time.Time
}

// MaxTelemetryBytes bounds the telemetry sample kept on a lease.
const MaxTelemetryBytes = 4 << 10

// HeartbeatRequest asks Heartbeat to touch a lease.
type HeartbeatRequest struct {
	// Owner and Org, when Owner is set, restrict the heartbeat to a lease
	// of theirs: another owner's lease is ErrNotFound.
	Owner, Org string
	// ExpectedProvider, when set, must equal the lease's provider.
	ExpectedProvider string
	// IdleTimeoutSeconds, when positive, replaces the lease's idle timeout
	// (the caller clamps it).
	IdleTimeoutSeconds int64
	// Telemetry, when set, replaces the lease's telemetry sample
	// (TelemetryAt = Now). At most MaxTelemetryBytes.
	Telemetry json.RawMessage
	Now       time.Time
}

// LeaseFilter selects leases for ListLeases. Empty fields match anything.
type LeaseFilter struct {
	State    LeaseState
	Provider string
	Owner    string
	Org      string
	Slug     string
	// Limit caps the result; 0 means 100.
	Limit int
}

// RunState is where a run is in its life.
type RunState string

const (
	RunRunning   RunState = "running"
	RunSucceeded RunState = "succeeded"
	RunFailed    RunState = "failed"
)

// MaxLogBytes is how much of a run's log is kept: the last 8 MiB.
const MaxLogBytes = 8 << 20

// Run is one run record.
type Run struct {
	ID         string
	LeaseID    string
	Slug       string
	Owner      string
	Org        string
	Provider   string
	Target     string
	Class      string
	ServerType string
	Command    []string
	Label      string
	State      RunState
	// Phase is the phase of the latest event that had one.
	Phase string
	// ExitCode is nil until the run finished.
	ExitCode     *int
	SyncMs       int64
	CommandMs    int64
	DurationMs   int64
	LogBytes     int64
	LogTruncated bool
	// Results is the JUnit summary as the client sent it (opaque JSON).
	Results     json.RawMessage
	StartedAt   time.Time
	LastEventAt time.Time
	EventCount  int64
	EndedAt     time.Time
	// Telemetry is the latest sample set by SetRunTelemetry (opaque JSON,
	// nil for none).
	Telemetry json.RawMessage
}

// RunEvent is one event of a run. Seq numbers a run's events from 1
// without gaps, in the order they were appended.
type RunEvent struct {
	RunID   string
	Seq     int64
	Type    string
	Phase   string
	Stream  string
	Message string
	// Data is opaque JSON from the client (may be nil).
	Data      json.RawMessage
	CreatedAt time.Time
	// Apply is what the event changes on its run; it is not stored with
	// the event.
	Apply RunUpdate
}

// RunUpdate is what an event changes on its run: non-empty lease fields
// replace the run's, and Fail ends a running run as failed (EndedAt =
// the event's time, ExitCode when set) without a finish.
type RunUpdate struct {
	LeaseID    string
	Slug       string
	Provider   string
	Target     string
	Class      string
	ServerType string
	Fail       bool
	ExitCode   *int
}

// RunFinish is the outcome a client reports for a run.
type RunFinish struct {
	ExitCode  int
	SyncMs    int64
	CommandMs int64
	// Log is the run's output; only its last MaxLogBytes are kept.
	Log []byte
	// LogTruncated says the client already dropped part of the log.
	LogTruncated bool
	Results      json.RawMessage
	Now          time.Time
}

// RunFilter selects runs for ListRuns. Empty fields match anything.
type RunFilter struct {
	LeaseID string
	Owner   string
	Org     string
	State   RunState
	// Limit caps the result; 0 means 50.
	Limit int
}

// UsageQuery selects the month and leases to aggregate.
type UsageQuery struct {
	// Month is any instant in the month (taken in UTC).
	Month time.Time
	// Owner and Org restrict the leases counted (empty: all).
	Owner string
	Org   string
	// Now bounds the runtime of leases still live.
	Now time.Time
}

// UsageGroup aggregates leases sharing one key (an owner, org, provider or
// server type) over one month.
type UsageGroup struct {
	Key string
	// Leases is how many leases ran during the month.
	Leases int
	// ActiveLeases is how many of them hold capacity now.
	ActiveLeases int
	// RuntimeSeconds is their runtime inside the month (until EndedAt, or
	// Now for leases not ended).
	RuntimeSeconds int64
	// EstimatedUSD is EstimatedHourlyUSD times that runtime.
	EstimatedUSD float64
	// ReservedUSD is what the leases reserve in this month, see
	// MonthlyReservedUSD, plus CheckpointStorageUSD.
	ReservedUSD float64
	// Checkpoints is how many native checkpoints stored an artifact
	// during the month, and CheckpointStorageUSD what that storage cost
	// in the month until Now (see CheckpointStorageUSD). Server type
	// groups have none.
	Checkpoints          int
	CheckpointStorageUSD float64
}

// Usage is the aggregation of one month. Registered leases are excluded.
type Usage struct {
	// Month is the first instant of the month, UTC.
	Month        time.Time
	Total        UsageGroup
	ByOwner      []UsageGroup
	ByOrg        []UsageGroup
	ByProvider   []UsageGroup
	ByServerType []UsageGroup
}

// Token is one entry of the token registry: a user token the coordinator
// issued (never the token itself, only its claims), or a tombstone that a
// revocation of an ID the registry never saw wrote (Owner empty, times
// other than RevokedAt zero).
type Token struct {
	// ID is the token's jti.
	ID     string
	Owner  string
	Org    string
	Login  string
	Source string // how it was issued, for example "github"
	// CreatedAt and ExpiresAt are the token's issue and expiry times.
	CreatedAt time.Time
	ExpiresAt time.Time
	// RevokedAt is zero while the token is not revoked; RevokedBy names
	// who revoked it.
	RevokedAt time.Time
	RevokedBy string
	// GitHub is the GitHub credential of a GitHub sign-in, sealed by the
	// coordinator, to check the user's membership again (private: never in
	// a response); CheckedAt is when that was last done.
	GitHub    string
	CheckedAt time.Time
}

// Revoked reports whether the token was revoked.
func (t Token) Revoked() bool { return !t.RevokedAt.IsZero() }

// TokenFilter selects tokens for ListTokens. Empty fields match anything.
type TokenFilter struct {
	Owner string
	Org   string
	// Limit caps the result; 0 means 200.
	Limit int
}

// Store is the coordinator's durable state. All methods are safe for
// concurrent use, also by several Store instances (processes) sharing one
// database. Errors are (or wrap) the sentinel errors of this package where
// the doc says so; anything else is an infrastructure failure.
type Store interface {
	// CreateLease creates a managed lease for an ordinary POST create,
	// bound to req.AttemptID, atomically:
	//   - attempt canceled (tombstone) for this owner+org: ErrCreateCanceled;
	//   - attempt already bound by this owner+org: replay the bound lease
	//     (Replayed) if it is live, else a *StateChangedError carrying it;
	//     bound to a different lease ID: ErrAttemptConflict;
	//   - lease ID in use by another owner/org: ErrLeaseIDConflict;
	//     by this owner+org under another attempt: ErrAttemptConflict if
	//     live, ErrLeaseIDConflict if ended;
	//   - slug used by a live lease of this owner+org: ErrSlugTaken;
	//   - over a limit (checked in the same transaction): *LimitError.
	CreateLease(ctx context.Context, req CreateRequest) (CreateResult, error)

	// PutLease creates a managed lease for a fixed-ID PUT, keyed by
	// req.RequestHash: the same owner+org and hash replays a live lease
	// (Replayed); a different owner, a different hash or an ended lease is
	// ErrLeaseIDConflict. Slug and limits as for CreateLease.
	PutLease(ctx context.Context, req CreateRequest) (CreateResult, error)

	// CancelCreate cancels the create attempt attemptID of owner+org for
	// lease leaseID. An attempt never seen gets a permanent tombstone (a
	// later CreateLease with it fails with ErrCreateCanceled), unless
	// leaseID is another owner's or org's lease: that is ErrNotFound and
	// writes nothing. A bound
	// attempt is marked canceled and its lease, if live, released with
	// server deletion queued (managed leases); the result carries the lease.
	// An attempt bound to another lease ID is ErrAttemptConflict.
	// Repeating a cancel is harmless.
	CancelCreate(ctx context.Context, leaseID, attemptID, owner, org string, now time.Time) (CancelResult, error)

	// ActivateLease finishes provisioning: update fills in what the provider
	// returned (host, cloud ID, host key...), and a lease still provisioning
	// becomes active with LastTouchedAt = now and ExpiresAt recomputed.
	// If the lease is no longer provisioning (canceled or released in the
	// meantime), the update is still recorded so the server can be found,
	// server deletion of a managed lease is queued again, and a
	// *StateChangedError is returned. On an already active lease only the
	// update is applied. The store ignores what update does to state,
	// times, cleanup and private fields; changing ID, owner, org or
	// lifecycle is ErrInvalid. update runs inside the transaction and
	// must not block.
	ActivateLease(ctx context.Context, id string, now time.Time, update func(*Lease)) (Lease, error)

	// FailLease marks a provisioning or active lease failed with reason.
	// With deleteServer the server's deletion is queued (the lease keeps
	// holding capacity until cleanup finishes); otherwise it ends now. A
	// lease that is no longer live is left alone: *StateChangedError.
	FailLease(ctx context.Context, id, reason string, deleteServer bool, now time.Time) (Lease, error)

	// RegisterLease inserts or refreshes a registered lease (lifecycle
	// registered) made elsewhere. l carries the full record; on refresh the
	// original CreatedAt is kept, the lease becomes active again and is
	// touched. An ID held by another owner/org or by a managed lease is
	// ErrLeaseIDConflict; one registered with another provider is
	// ErrProviderMismatch. created is true for a new record.
	RegisterLease(ctx context.Context, l Lease, now time.Time) (lease Lease, created bool, err error)

	// GetLease returns the lease with this ID, whoever owns it, or
	// ErrNotFound.
	GetLease(ctx context.Context, id string) (Lease, error)

	// FindLease resolves ref, a lease ID or slug, among owner+org's leases:
	// by ID only if owner and org match; by slug the live lease with it,
	// else the most recently created ended one. ErrNotFound otherwise.
	FindLease(ctx context.Context, ref, owner, org string) (Lease, error)

	// ListLeases returns leases matching f, newest (CreatedAt) first.
	ListLeases(ctx context.Context, f LeaseFilter) ([]Lease, error)

	// Heartbeat touches a live lease: LastTouchedAt = now, the idle timeout
	// replaced when req.IdleTimeoutSeconds > 0, the telemetry sample
	// replaced when req.Telemetry is set, ExpiresAt recomputed. A
	// successful heartbeat is one database statement.
	// Errors: ErrNotFound; ErrProviderMismatch; ErrLeaseEnded (not live);
	// ErrLeaseExpired when now >= ExpiresAt or a cleanup claim holds the
	// lease (an expired lease is never revived).
	Heartbeat(ctx context.Context, id string, req HeartbeatRequest) (Lease, error)

	// Release ends a live lease: state released, ReleasedAt = now. For a
	// managed lease with req.DeleteServer the server's deletion is queued
	// (ReleaseDeletesServer, CleanupStartedAt) and EndedAt is set when
	// cleanup finishes; otherwise EndedAt = now. Releasing an ended lease
	// returns it unchanged. ErrProviderMismatch, ErrNotFound.
	Release(ctx context.Context, id string, req ReleaseRequest) (Lease, error)

	// ClaimForCleanup claims up to limit leases that need cleanup: live
	// leases past ExpiresAt and leases whose server deletion is queued,
	// whose CleanupRetryAt (if set) has passed, and that no other live
	// claim holds. Each returned lease carries a fresh CleanupToken; the
	// claim lapses at now+hold, after which another caller may claim the
	// lease again (its holder died). Two callers never hold a claim on the
	// same lease at once. Registered leases are claimed too: finishing
	// their cleanup calls no provider. Leases with ReleaseDeletesServer
	// need their server deleted; live ones past expiry do too (managed).
	// An idle pool box whose take reservation lapsed (the take died) is
	// claimed too: it becomes failed with its server's deletion queued,
	// in the claiming transaction, so it is never handed out.
	ClaimForCleanup(ctx context.Context, now time.Time, limit int, hold time.Duration) ([]Lease, error)

	// RenewCleanupClaim extends the claim token holds on lease id to
	// now+hold, so a holder that is still working keeps a short claim
	// alive while one that died loses it soon. A stale token is
	// ErrClaimLost and changes nothing.
	RenewCleanupClaim(ctx context.Context, id, token string, now time.Time, hold time.Duration) error

	// FinishCleanup commits a cleanup if token still holds the claim: a
	// live lease becomes expired, a queued deletion is done; EndedAt = now,
	// cleanup fields and ReleaseDeletesServer are cleared (CleanupAttempts
	// is kept). A stale token is ErrClaimLost and changes nothing.
	FinishCleanup(ctx context.Context, id, token string, now time.Time) (Lease, error)

	// FailCleanup records a failed cleanup if token still holds the claim:
	// CleanupAttempts++, CleanupError = cause, CleanupRetryAt = retryAt,
	// claim dropped, lease kept as it was (still holding capacity).
	// A stale token is ErrClaimLost.
	FailCleanup(ctx context.Context, id, token, cause string, now, retryAt time.Time) (Lease, error)

	// NextCleanupAt is the earliest time at which ClaimForCleanup may
	// return something (the soonest expiry, retry time, claim lapse or
	// lapse of a pool box's take reservation; it
	// may lie in the past when work is due now), and false when no lease
	// awaits cleanup.
	NextCleanupAt(ctx context.Context) (time.Time, bool, error)

	// CreateRun inserts a new run (State running unless set, EventCount 0).
	// An existing ID is ErrRunExists.
	CreateRun(ctx context.Context, r Run) (Run, error)

	// GetRun returns the run or ErrNotFound.
	GetRun(ctx context.Context, id string) (Run, error)

	// ListRuns returns runs matching f, newest (StartedAt) first.
	ListRuns(ctx context.Context, f RunFilter) ([]Run, error)

	// AppendRunEvent appends ev to run runID, numbering it with the next
	// seq (gapless from 1, also under concurrent appends), updates the
	// run's EventCount, LastEventAt (= ev.CreatedAt) and Phase (when
	// ev.Phase is set), and applies ev.Apply. Events are taken after the
	// run ended too (clients report the lease's release then).
	// ErrNotFound.
	AppendRunEvent(ctx context.Context, runID string, ev RunEvent) (RunEvent, error)

	// SetRunTelemetry stores telemetry (valid JSON) as the run's latest
	// sample, also after it ended. ErrNotFound.
	SetRunTelemetry(ctx context.Context, runID string, telemetry json.RawMessage) error

	// ListRunEvents returns up to limit events with seq > after, in order;
	// limit 0 means 500. ErrNotFound for an unknown run.
	ListRunEvents(ctx context.Context, runID string, after int64, limit int) ([]RunEvent, error)

	// FinishRun ends a running run: exit code, timings, results, log (its
	// last MaxLogBytes kept; LogTruncated when cut here or by the client),
	// DurationMs = Now - StartedAt, state succeeded for exit code 0 else
	// failed. A run that a failing event ended (RunUpdate.Fail) still takes
	// its finish. Repeating an identical finish returns the run unchanged;
	// a different finish of a finished run is ErrRunConflict.
	FinishRun(ctx context.Context, runID string, f RunFinish) (Run, error)

	// RunLog returns the stored log of a run (empty before it finished).
	RunLog(ctx context.Context, runID string) ([]byte, error)

	// Usage aggregates the managed leases that ran during q.Month. A
	// taken pool box counts twice: its idle time before the take as a
	// lease of the pool's owner (PoolOwner) and org, its time after as a
	// lease of its new owner.
	Usage(ctx context.Context, q UsageQuery) (Usage, error)

	// RecordToken records a token the coordinator issued (ID, Owner,
	// CreatedAt and ExpiresAt required). An ID already recorded is
	// ErrTokenExists; one revoked before it was recorded (a tombstone)
	// is recorded as revoked.
	RecordToken(ctx context.Context, t Token) (Token, error)

	// ListTokens returns the tokens matching f, newest (CreatedAt, or
	// RevokedAt for a tombstone) first; tombstones (no owner, no org) only
	// when f names neither.
	ListTokens(ctx context.Context, f TokenFilter) ([]Token, error)

	// GetToken returns the registry entry of id, or ErrNotFound.
	GetToken(ctx context.Context, id string) (Token, error)

	// RevokeToken revokes token id (RevokedAt = now, RevokedBy = by) and
	// returns its entry. Revoking a revoked token returns it unchanged. An
	// ID the registry never saw (a token minted offline) gets a tombstone,
	// so it is refused too.
	RevokeToken(ctx context.Context, id, by string, now time.Time) (Token, error)

	// RevokedTokenIDs returns the IDs of the revoked tokens that have not
	// expired at now (tombstones always): the set a coordinator refuses.
	// It reads one index and is cheap to call every second.
	RevokedTokenIDs(ctx context.Context, now time.Time) ([]string, error)

	// DueTokenChecks returns up to limit live tokens with a GitHub
	// credential (not revoked, not expired at now) last checked before
	// checkedBefore, the longest unchecked first.
	DueTokenChecks(ctx context.Context, checkedBefore, now time.Time, limit int) ([]Token, error)

	// MarkTokenChecked records that token id's user was checked at now.
	MarkTokenChecked(ctx context.Context, id string, now time.Time) error

	// CreateCheckpoint inserts a new checkpoint in state creating, with a
	// "created" event, after checking req.Limits in the same serialised
	// transaction as lease creates (a *LimitError of kind
	// LimitCheckpoints or LimitCheckpointCreating). An existing ID is
	// ErrCheckpointExists.
	CreateCheckpoint(ctx context.Context, req CheckpointCreate) (Checkpoint, error)

	// ReadyCheckpoint records the artifact of a creating checkpoint and
	// makes it ready (ReadyAt = LastUsedAt = now). A checkpoint that is no
	// longer creating (failed by maintenance meanwhile) keeps its state,
	// gets the artifact recorded and its deletion queued, and the call
	// returns ErrCheckpointNotReady.
	ReadyCheckpoint(ctx context.Context, id string, a CheckpointArtifactInfo, now time.Time) (Checkpoint, error)

	// FailCheckpoint marks a creating checkpoint failed with reason; with
	// cleanup, the deletion of whatever its creation left is queued. A
	// checkpoint that is not creating is left alone: ErrCheckpointNotReady.
	FailCheckpoint(ctx context.Context, id, reason string, cleanup bool, now time.Time) (Checkpoint, error)

	// GetCheckpoint returns the checkpoint, whoever owns it, or ErrNotFound.
	GetCheckpoint(ctx context.Context, id string) (Checkpoint, error)

	// ListCheckpoints returns the checkpoints matching f, newest first.
	ListCheckpoints(ctx context.Context, f CheckpointFilter) ([]Checkpoint, error)

	// ListCheckpointEvents returns up to limit kept events of checkpoint id
	// with seq > after, in order (limit 0: all kept). ErrNotFound for an
	// unknown checkpoint.
	ListCheckpointEvents(ctx context.Context, id string, after int64, limit int) ([]CheckpointEvent, error)

	// SetCheckpointRetention sets the unused expiry of a creating or ready
	// checkpoint of owner+org (0: manual) with a "retention_changed"
	// event; ErrNotFound for another owner's, ErrCheckpointNotReady for a
	// deleting or ended one.
	SetCheckpointRetention(ctx context.Context, id, owner, org string, unusedSeconds int64, now time.Time) (Checkpoint, error)

	// ClaimCheckpointUse records a use claim of a ready checkpoint of
	// c.Owner+c.Org (LastUsedAt = now, a "used" event). ErrNotFound,
	// ErrCheckpointNotReady, ErrTooManyClaims.
	ClaimCheckpointUse(ctx context.Context, c UseClaim, now time.Time) (Checkpoint, error)

	// ForkLease creates a provisioning lease from a checkpoint, consuming
	// a use claim, atomically: the checkpoint must be ready and owner+org's,
	// the claim theirs, for this checkpoint, unexpired and unused. It
	// binds the claim to the lease, counts the use (Uses++, LastUsedAt)
	// and writes a "forked" event. A replay (the same attempt, or a
	// fixed-ID lease with the same request hash) returns the lease
	// (Replayed) when the claim is the one bound to it or a valid unused
	// one (then consumed), and ErrClaimInvalid otherwise; it does not
	// count another use. Lease ID, attempt, slug and limit errors are
	// those of CreateLease and PutLease; a claim that is not valid is
	// ErrClaimInvalid; a checkpoint not ready ErrCheckpointNotReady.
	ForkLease(ctx context.Context, req ForkCreate) (CreateResult, error)

	// RequestCheckpointDelete queues the deletion of a ready checkpoint of
	// owner+org (state deleting, a "delete_requested" event). Deleting,
	// deleted and failed checkpoints are returned unchanged; a creating
	// one is ErrCheckpointBusy; another owner's ErrNotFound.
	RequestCheckpointDelete(ctx context.Context, id, owner, org string, now time.Time) (Checkpoint, error)

	// ClaimCheckpointsForCleanup claims up to limit checkpoints whose
	// artifact must be deleted: those with a deletion pending, ready ones
	// past ExpiresAt (they become deleting, with an "expired" event, in
	// the claiming transaction, so expiry happens once), and creating ones
	// created before staleBefore (their creator died: they become failed
	// with their leftovers' deletion pending). A checkpoint a provisioning
	// fork still uses, or whose CleanupRetryAt has not come, or that
	// another live claim holds, is skipped. Each carries a fresh
	// CleanupToken; the claim lapses at now+hold.
	ClaimCheckpointsForCleanup(ctx context.Context, now, staleBefore time.Time, limit int, hold time.Duration) ([]Checkpoint, error)

	// RenewCheckpointClaim extends a cleanup claim; ErrClaimLost for a
	// stale token.
	RenewCheckpointClaim(ctx context.Context, id, token string, now time.Time, hold time.Duration) error

	// FinishCheckpointCleanup commits a deletion if token holds the claim:
	// a deleting checkpoint becomes deleted (DeletedAt = now, a "deleted"
	// event), a failed one stays failed; the deletion is no longer
	// pending. ErrClaimLost for a stale token.
	FinishCheckpointCleanup(ctx context.Context, id, token string, now time.Time) (Checkpoint, error)

	// FailCheckpointCleanup records a failed deletion if token holds the
	// claim: CleanupAttempts++, CleanupError, CleanupRetryAt = retryAt, a
	// "delete_failed" event, claim dropped, deletion still pending.
	FailCheckpointCleanup(ctx context.Context, id, token, cause string, now, retryAt time.Time) (Checkpoint, error)

	// NextCheckpointCleanupAt is the earliest time at which
	// ClaimCheckpointsForCleanup may return something given staleAfter
	// (how long a creation may run), and false when nothing awaits.
	NextCheckpointCleanupAt(ctx context.Context, staleAfter time.Duration) (time.Time, bool, error)

	// SetLeaseShare replaces the share of lease id, setting
	// share.UpdatedAt to now, and returns the lease; an empty share
	// clears it (UpdatedAt and UpdatedBy included). No other write of a
	// lease changes its share. User names match trimmed and in lower
	// case.
	// ErrNotFound when there is no lease id.
	SetLeaseShare(ctx context.Context, id string, share LeaseShare, now time.Time) (Lease, error)
	// SharedLeases lists the live leases shared with user owner of org:
	// those whose share names owner among its users, and those of org
	// whose share has an org grant. The lease's own owner is not matched
	// (an owner finds its leases with FindLease and ListLeases). ref, when
	// not empty, narrows the list to the lease with that ID or slug. Newest
	// first, at most limit (0: 200).
	SharedLeases(ctx context.Context, owner, org, ref string, limit int) ([]Lease, error)

	// PutPool creates or replaces the definition of pool p.Key (its
	// counters and CreatedAt are kept); created is true for a new pool.
	// Replacing a definition leaves the existing boxes alone (the
	// maintenance loop trims or replaces what no longer fits).
	PutPool(ctx context.Context, p Pool, now time.Time) (pool Pool, created bool, err error)

	// GetPool returns the pool or ErrNotFound.
	GetPool(ctx context.Context, key string) (Pool, error)

	// ListPools returns every pool, by key.
	ListPools(ctx context.Context) ([]Pool, error)

	// DeletePool removes the pool's definition and ends its idle boxes
	// that no take holds: ready ones are released with their deletion
	// queued, provisioning ones failed with their deletion queued (so
	// their activation deletes what the provider made). Reserved boxes are
	// left to their take. ErrNotFound for an unknown pool.
	DeletePool(ctx context.Context, key string, now time.Time) (Pool, error)

	// SetPoolError records (msg set) or clears (msg empty) the pool's
	// latest refill failure. ErrNotFound.
	SetPoolError(ctx context.Context, key, msg string, now time.Time) error

	// PoolCounts counts the pool's idle boxes (live, not taken) at now.
	PoolCounts(ctx context.Context, key string, now time.Time) (PoolCounts, error)

	// ListPoolLeases returns the pool's idle boxes (live, not taken),
	// oldest first. PoolCounts and ListPoolLeases see the boxes a deleted
	// pool left to their takes too.
	ListPoolLeases(ctx context.Context, key string) ([]Lease, error)

	// AddPoolLease inserts a new provisioning idle box of pool
	// req.Lease.Pool (owner PoolOwner(key), the pool's org), in the same
	// serialised transaction as lease creates: ErrPoolFull when the pool
	// already has want idle boxes (provisioning, ready or reserved) or
	// Max of them; a *LimitError when the global or the pool org's limits
	// are reached (idle boxes count as their org's spend and leases);
	// ErrNotFound for an unknown pool.
	AddPoolLease(ctx context.Context, req PoolAdd, want int) (Lease, error)

	// ReservePoolLease reserves one ready, unreserved, unexpired idle box of
	// the pool (the oldest) for one take until now+hold, and returns it
	// with a fencing token. Several callers never reserve the same box, on
	// any number of replicas sharing the database. ErrPoolEmpty when no box
	// is ready; ErrNotFound for an unknown pool; a *LimitError when the
	// taker (owner, org) is over their active-lease limits.
	ReservePoolLease(ctx context.Context, key, owner, org string, limits Limits, now time.Time, hold time.Duration) (PoolReservation, error)

	// CommitPoolTake hands a reserved box to its new owner if the token
	// still holds the reservation: owner, org, slug, labels, terms and
	// cost from t, PoolTakenAt = CreatedAt = LastTouchedAt = t.Now,
	// ExpiresAt recomputed, the create attempt (or request hash) bound,
	// the pool's TakenTotal counted; the idle time before counts for the
	// pool's org in Usage and monthly reservations, the time after for
	// the new owner. A replay of a bound attempt or hash returns that
	// lease (Replayed) and leaves the reserved box reserved. ErrClaimLost
	// for a stale token; slug and limit errors as for CreateLease.
	CommitPoolTake(ctx context.Context, t PoolTake) (CreateResult, error)

	// TrimPool queues the deletion of the pool's ready, unreserved idle
	// boxes beyond keep (the oldest first) and returns them.
	TrimPool(ctx context.Context, key string, keep int, now time.Time) ([]Lease, error)

	// Close releases the database.
	Close() error
}

// Sentinel errors. Test with errors.Is.
var (
	ErrNotFound = errors.New("not found")
	// ErrInvalid: the call's arguments break the store's contract (an
	// empty ID, an unknown state...). The message names what was wrong.
	ErrInvalid = errors.New("invalid argument")
	// ErrAttemptConflict maps to 409 create_attempt_conflict.
	ErrAttemptConflict = errors.New("create attempt conflict")
	// ErrLeaseIDConflict maps to 409 lease_id_conflict.
	ErrLeaseIDConflict = errors.New("lease id conflict")
	// ErrCreateCanceled maps to 409 create_canceled.
	ErrCreateCanceled = errors.New("create canceled")
	// ErrLeaseStateChanged maps to 409 lease_state_changed; the error is a
	// *StateChangedError carrying the lease.
	ErrLeaseStateChanged = errors.New("lease state changed")
	// ErrSlugTaken: another live lease of the owner+org has the slug.
	ErrSlugTaken = errors.New("slug taken")
	// ErrLimitExceeded maps to 429 cost_limit_exceeded; the error is a
	// *LimitError.
	ErrLimitExceeded = errors.New("limit exceeded")
	// ErrLeaseExpired maps to 409 lease_expired.
	ErrLeaseExpired = errors.New("lease expired")
	// ErrLeaseEnded maps to 409 lease_ended.
	ErrLeaseEnded = errors.New("lease ended")
	// ErrProviderMismatch maps to 409 provider_identity_mismatch.
	ErrProviderMismatch = errors.New("provider identity mismatch")
	// ErrClaimLost: a cleanup token no longer holds its claim.
	ErrClaimLost = errors.New("cleanup claim lost")
	// ErrRunExists: a run with this ID exists.
	ErrRunExists = errors.New("run exists")
	// ErrRunFinished: the run has finished and takes no more events.
	ErrRunFinished = errors.New("run finished")
	// ErrRunConflict: a finished run got a different finish.
	ErrRunConflict = errors.New("run finish conflict")
	// ErrTokenExists: a token with this ID is already recorded.
	ErrTokenExists = errors.New("token exists")
)

// StateChangedError reports that a lease is no longer in the state the
// request expected (for example a create replay of a lease that ended).
type StateChangedError struct {
	Lease Lease
}

func (e *StateChangedError) Error() string {
	return fmt.Sprintf("lease %s is %s", e.Lease.ID, e.Lease.State)
}

// Is makes errors.Is(err, ErrLeaseStateChanged) true.
func (e *StateChangedError) Is(target error) bool { return target == ErrLeaseStateChanged }

// Limit kinds of a LimitError.
const (
	LimitActiveLeases = "active lease"
	LimitMonthlyUSD   = "monthly reserved USD"
)

// LimitError reports a create refused by a configured maximum.
type LimitError struct {
	// Kind is LimitActiveLeases, LimitMonthlyUSD, LimitCheckpoints or
	// LimitCheckpointCreating.
	Kind string
	// Scope is "global", "owner" or "org".
	Scope string
	// Would is the count or amount including the new lease; Max the limit.
	Would float64
	Max   float64
}

// Error reads like "active lease limit exceeded: 2/1" (global scope),
// "owner checkpoint limit exceeded: 3/2" or
// "owner monthly reserved USD limit exceeded: 12.50/10.00".
func (e *LimitError) Error() string {
	prefix := ""
	if e.Scope != "" && e.Scope != "global" {
		prefix = e.Scope + " "
	}
	if e.Kind != LimitMonthlyUSD {
		return fmt.Sprintf("%s%s limit exceeded: %d/%d", prefix, e.Kind, int64(e.Would), int64(e.Max))
	}
	return fmt.Sprintf("%s%s limit exceeded: %.2f/%.2f", prefix, e.Kind, e.Would, e.Max)
}

// Is makes errors.Is(err, ErrLimitExceeded) true.
func (e *LimitError) Is(target error) bool { return target == ErrLimitExceeded }
