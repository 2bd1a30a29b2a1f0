package api

import (
	"time"

	"github.com/crabbox-dev/crabbox/internal/hexid"
	"github.com/crabbox-dev/crabbox/lease"
)

// CheckpointState is a brokered native checkpoint's state.
type CheckpointState string

// Checkpoint states: creating while the provider saves the box, ready once
// its artifact exists, deleting while the artifact's deletion is queued,
// deleted after it; failed when the creation failed.
const (
	CheckpointCreating CheckpointState = "creating"
	CheckpointReady    CheckpointState = "ready"
	CheckpointDeleting CheckpointState = "deleting"
	CheckpointDeleted  CheckpointState = "deleted"
	CheckpointFailed   CheckpointState = "failed"
)

// Retention modes of a checkpoint.
const (
	// RetentionManual keeps a checkpoint until it is deleted (the default).
	RetentionManual = "manual"
	// RetentionUnused deletes a checkpoint once it was not used (created,
	// claimed for use or forked) for UnusedExpirySeconds.
	RetentionUnused = "unused"
)

// Checkpoint limits.
const (
	// MinUnusedExpirySeconds and MaxUnusedExpirySeconds bound an unused
	// expiry.
	MinUnusedExpirySeconds = 60
	MaxUnusedExpirySeconds = 366 * 86400
	// DefaultUseClaimSeconds is how long a use claim is valid unless the
	// request asks for less or more, at most MaxUseClaimSeconds.
	DefaultUseClaimSeconds = 600
	MaxUseClaimSeconds     = 3600
	// MaxCheckpointEvents is how many recent events a checkpoint keeps.
	MaxCheckpointEvents = 256
	// DefaultCheckpointListLimit and MaxCheckpointListLimit bound GET
	// /v1/checkpoints.
	DefaultCheckpointListLimit = 100
	MaxCheckpointListLimit     = 500
)

// Checkpoint error codes.
const (
	// CodeCheckpointUnsupported (400): the provider of the lease or
	// checkpoint has no native checkpoints (or forks).
	CodeCheckpointUnsupported = "checkpoint_unsupported"
	// CodeCheckpointSourceInactive (409): the source lease is not an
	// active managed lease.
	CodeCheckpointSourceInactive = "checkpoint_source_not_active"
	// CodeCheckpointNotReady (409): the checkpoint is not ready (still
	// creating, deleting, deleted or failed).
	CodeCheckpointNotReady = "checkpoint_not_ready"
	// CodeCheckpointBusy (409): the checkpoint is still being created and
	// cannot be deleted yet.
	CodeCheckpointBusy = "checkpoint_busy"
	// CodeCheckpointClaimInvalid (409): the use claim is unknown, expired,
	// for another checkpoint, or already used by another lease.
	CodeCheckpointClaimInvalid = "checkpoint_claim_invalid"
	// CodeCheckpointIDConflict (409): the checkpoint ID is taken by another
	// request.
	CodeCheckpointIDConflict = "checkpoint_id_conflict"
	// CodeCheckpointLimitExceeded (429): a checkpoint count, creation or
	// open-claim limit.
	CodeCheckpointLimitExceeded = "checkpoint_limit_exceeded"
)

// CheckpointRetention is a checkpoint's retention.
type CheckpointRetention struct {
	// Mode is RetentionManual or RetentionUnused.
	Mode string `json:"mode"`
	// UnusedExpirySeconds is set for RetentionUnused.
	UnusedExpirySeconds int64 `json:"unusedExpirySeconds,omitempty"`
}

// Checkpoint is a brokered native checkpoint: a provider artifact (an
// image, a snapshot) of a lease's box, owned by that lease's owner and
// org.
type Checkpoint struct {
	ID          string          `json:"id"`
	Owner       string          `json:"owner"`
	Org         string          `json:"org"`
	Provider    string          `json:"provider"`
	SourceLease string          `json:"sourceLease"`
	State       CheckpointState `json:"state"`
	Target      Target          `json:"target,omitempty"`
	Class       string          `json:"class,omitempty"`
	ServerType  string          `json:"serverType,omitempty"`
	Location    string          `json:"location,omitempty"`
	WorkRoot    string          `json:"workRoot,omitempty"`
	// ArtifactID is the provider's ID of the artifact; Locators the
	// provider settings that find it (a region, a zone).
	ArtifactID string              `json:"artifactID,omitempty"`
	Locators   map[string]string   `json:"locators,omitempty"`
	SizeBytes  int64               `json:"sizeBytes"`
	Labels     map[string]string   `json:"labels,omitempty"`
	Retention  CheckpointRetention `json:"retention"`
	// Uses counts the leases forked from it.
	Uses              int64     `json:"uses"`
	CreatedAt         time.Time `json:"createdAt"`
	UpdatedAt         time.Time `json:"updatedAt"`
	ReadyAt           time.Time `json:"readyAt,omitzero"`
	LastUsedAt        time.Time `json:"lastUsedAt,omitzero"`
	ExpiresAt         time.Time `json:"expiresAt,omitzero"`
	DeleteRequestedAt time.Time `json:"deleteRequestedAt,omitzero"`
	DeletedAt         time.Time `json:"deletedAt,omitzero"`
	FailureError      string    `json:"failureError,omitempty"`
	// DeletePending is true while the deletion of the artifact (or of a
	// failed creation's leftovers) is queued.
	DeletePending   bool      `json:"deletePending,omitempty"`
	CleanupAttempts int       `json:"cleanupAttempts"`
	CleanupError    string    `json:"cleanupError,omitempty"`
	CleanupRetryAt  time.Time `json:"cleanupRetryAt,omitzero"`
	// StorageGBMonthUSD is the storage price per GB and month (730 hours)
	// recorded at creation, and StorageUSD what the artifact cost so far.
	StorageGBMonthUSD float64 `json:"storageGBMonthUSD"`
	StorageUSD        float64 `json:"storageUSD"`
}

// CheckpointRequest is the body of POST /v1/checkpoints.
type CheckpointRequest struct {
	// LeaseID names the source lease (an ID or slug): an active managed
	// lease of the caller.
	LeaseID string `json:"leaseID"`
	// CheckpointID optionally fixes the new checkpoint's ID (ckp_ and 12
	// lowercase hex digits); repeating the same request replays it.
	CheckpointID string            `json:"checkpointID,omitempty"`
	Labels       map[string]string `json:"labels,omitempty"`
	// Retention defaults to manual.
	Retention *CheckpointRetention `json:"retention,omitempty"`
}

// CheckpointResponse answers the single-checkpoint routes.
type CheckpointResponse struct {
	Checkpoint Checkpoint `json:"checkpoint"`
}

// CheckpointsResponse answers GET /v1/checkpoints, newest first.
type CheckpointsResponse struct {
	Checkpoints []Checkpoint `json:"checkpoints"`
}

// CheckpointEvent is one audit event of a checkpoint.
type CheckpointEvent struct {
	Seq       int64     `json:"seq"`
	Type      string    `json:"type"`
	Actor     string    `json:"actor,omitempty"`
	Message   string    `json:"message,omitempty"`
	LeaseID   string    `json:"leaseID,omitempty"`
	CreatedAt time.Time `json:"createdAt"`
}

// CheckpointEventsResponse answers GET /v1/checkpoints/{id}/events: the
// kept suffix (at most MaxCheckpointEvents) of its events, in order.
type CheckpointEventsResponse struct {
	Events []CheckpointEvent `json:"events"`
}

// UseRequest is the (optional) body of POST /v1/checkpoints/{id}/use.
type UseRequest struct {
	// TTLSeconds is how long the claim is valid: default
	// DefaultUseClaimSeconds, at most MaxUseClaimSeconds.
	TTLSeconds int `json:"ttlSeconds,omitempty"`
}

// UseClaim is a one-time permission to start one lease from a checkpoint.
// Its token is shown once and never stored by the coordinator.
type UseClaim struct {
	Token        string    `json:"token"`
	CheckpointID string    `json:"checkpointID"`
	ExpiresAt    time.Time `json:"expiresAt"`
}

// UseResponse answers POST /v1/checkpoints/{id}/use.
type UseResponse struct {
	Claim      UseClaim   `json:"claim"`
	Checkpoint Checkpoint `json:"checkpoint"`
}

// ForkRequest is the body of POST /v1/leases/from-checkpoint and PUT
// /v1/leases/{id}/from-checkpoint: a lease started from a checkpoint. The
// provider, target, class, server type, location, SSH user and port and
// work root are the checkpoint's; the image is its artifact.
type ForkRequest struct {
	LeaseID string `json:"leaseID,omitempty"`
	// CreateAttemptID binds a POST like an ordinary create; not allowed
	// on the fixed-ID PUT.
	CreateAttemptID    string            `json:"createAttemptID,omitempty"`
	CheckpointID       string            `json:"checkpointID"`
	UseClaim           string            `json:"useClaim"`
	Slug               string            `json:"slug,omitempty"`
	SSHPublicKey       string            `json:"sshPublicKey"`
	TTLSeconds         int               `json:"ttlSeconds,omitempty"`
	IdleTimeoutSeconds int               `json:"idleTimeoutSeconds,omitempty"`
	Keep               bool              `json:"keep,omitempty"`
	Labels             map[string]string `json:"labels,omitempty"`
}

// IsCheckpointID reports whether s is a checkpoint ID: ckp_ and 12
// lowercase hex digits.
func IsCheckpointID(s string) bool { return lease.IsCheckpointID(s) }

// IsUseClaimToken reports whether s has the shape of a use claim token:
// ckc_ and 32 lowercase hex digits.
func IsUseClaimToken(s string) bool { return hexid.Valid(s, "ckc_", 32) }

// NewUseClaimToken returns a fresh use claim token.
func NewUseClaimToken() string { return "ckc_" + randomHex(16) }
