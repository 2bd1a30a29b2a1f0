package store

import (
	"errors"
	"time"
)

// CheckpointState is where a brokered native checkpoint is in its life.
type CheckpointState string

// Checkpoint states. A checkpoint is creating while its provider saves the
// box, ready once the artifact exists, deleting while its artifact's
// deletion is queued, and deleted after it. A failed creation ends failed
// (its leftovers, if any, are deleted like a deleting checkpoint's).
const (
	CheckpointCreating CheckpointState = "creating"
	CheckpointReady    CheckpointState = "ready"
	CheckpointDeleting CheckpointState = "deleting"
	CheckpointDeleted  CheckpointState = "deleted"
	CheckpointFailed   CheckpointState = "failed"
)

// Valid reports whether s is one of the known states.
func (s CheckpointState) Valid() bool {
	switch s {
	case CheckpointCreating, CheckpointReady, CheckpointDeleting, CheckpointDeleted, CheckpointFailed:
		return true
	}
	return false
}

// Ended reports whether a checkpoint in state s holds no artifact the
// coordinator still answers for (deleted or failed; a failed one may
// still wait for its leftovers' deletion, see Checkpoint.DeletePending).
func (s CheckpointState) Ended() bool { return s == CheckpointDeleted || s == CheckpointFailed }

// MaxCheckpointEvents is how many of a checkpoint's most recent audit
// events the store keeps.
const MaxCheckpointEvents = 256

// Checkpoint event types.
const (
	EventCheckpointCreated          = "created"
	EventCheckpointReady            = "ready"
	EventCheckpointCreateFailed     = "create_failed"
	EventCheckpointUsed             = "used"
	EventCheckpointForked           = "forked"
	EventCheckpointRetentionChanged = "retention_changed"
	EventCheckpointExpired          = "expired"
	EventCheckpointDeleteRequested  = "delete_requested"
	EventCheckpointDeleted          = "deleted"
	EventCheckpointDeleteFailed     = "delete_failed"
)

// Checkpoint is the record of one brokered native checkpoint: a provider
// artifact made from a lease's box, owned by the lease's owner and org.
type Checkpoint struct {
	ID          string
	Owner       string
	Org         string
	Provider    string
	SourceLease string
	State       CheckpointState
	// The source lease's shape, which forks start with.
	Target     string
	Class      string
	ServerType string
	Location   string
	WorkRoot   string
	SSHUser    string
	SSHPort    string
	// ArtifactID is the provider's ID of the artifact (empty until
	// ready); Locators are the provider settings to find it; SizeBytes
	// is what the provider stores for it.
	ArtifactID     string
	Locators       map[string]string
	ArtifactLabels map[string]string
	SizeBytes      int64
	// GBMonthUSD is the storage price recorded at creation: what one GB
	// of the artifact costs for a month (730 hours).
	GBMonthUSD float64
	Labels     map[string]string
	// UnusedExpirySeconds, when positive, deletes the checkpoint once it
	// was not used (created, claimed or forked) for that long; zero is
	// manual retention.
	UnusedExpirySeconds int64
	Uses                int64
	CreatedAt           time.Time
	UpdatedAt           time.Time
	ReadyAt             time.Time
	LastUsedAt          time.Time
	// ExpiresAt is LastUsedAt+UnusedExpirySeconds for a ready checkpoint
	// with unused expiry, else zero (computed by the store).
	ExpiresAt         time.Time
	DeleteRequestedAt time.Time
	DeletedAt         time.Time
	FailureError      string
	// DeletePending is true while the deletion of the artifact (or of a
	// failed creation's leftovers) is queued and not done.
	DeletePending   bool
	CleanupAttempts int
	CleanupError    string
	CleanupRetryAt  time.Time
	// CleanupToken is the fencing token of the current cleanup claim
	// (private).
	CleanupToken string
}

// CheckpointExpiresAt computes a ready checkpoint's unused expiry (zero
// for manual retention).
func CheckpointExpiresAt(lastUsed time.Time, unusedSeconds int64) time.Time {
	if unusedSeconds <= 0 || lastUsed.IsZero() {
		return time.Time{}
	}
	return lastUsed.Add(time.Duration(unusedSeconds) * time.Second)
}

// CheckpointEvent is one audit event of a checkpoint. Seq numbers a
// checkpoint's events from 1; only the last MaxCheckpointEvents are kept.
type CheckpointEvent struct {
	CheckpointID string
	Seq          int64
	Type         string
	// Actor is who caused it (an owner, or "maintenance").
	Actor   string
	Message string
	// LeaseID is the lease the event concerns (a fork), if any.
	LeaseID   string
	CreatedAt time.Time
}

// CheckpointLimits bound checkpoints at creation; zero is unlimited.
// Checkpoints count while they hold or may hold an artifact (creating,
// ready, deleting, or a deletion pending).
type CheckpointLimits struct {
	MaxPerOwner int
	MaxPerOrg   int
	// MaxCreating bounds the checkpoints being created at once, all
	// owners together.
	MaxCreating int
	// MaxCreatingPerOwner bounds one owner's checkpoints being created.
	MaxCreatingPerOwner int
}

// Limit kinds of a LimitError for checkpoints.
const (
	LimitCheckpoints        = "checkpoint"
	LimitCheckpointCreating = "checkpoint creation"
)

// CheckpointCreate asks CreateCheckpoint for a new creating checkpoint.
type CheckpointCreate struct {
	// Checkpoint is the new record: ID, Owner, Org, Provider,
	// SourceLease, the source's shape, GBMonthUSD, Labels and
	// UnusedExpirySeconds. The store sets the state and times.
	Checkpoint Checkpoint
	Limits     CheckpointLimits
	// Monthly, when it sets monthly maxima, refuses the checkpoint (a
	// *LimitError of kind LimitMonthlyUSD) while the month's reservations
	// already exceed one; its active-lease maxima are ignored.
	Monthly Limits
	Now     time.Time
}

// CheckpointArtifactInfo is what a provider returned for a new checkpoint.
type CheckpointArtifactInfo struct {
	ArtifactID string
	Locators   map[string]string
	Labels     map[string]string
	SizeBytes  int64
}

// CheckpointFilter selects checkpoints for ListCheckpoints; empty fields
// match anything.
type CheckpointFilter struct {
	Owner string
	Org   string
	State CheckpointState
	// Limit caps the result; 0 means 100.
	Limit int
}

// UseClaim is a checkpoint use claim: a one-time permission to fork the
// checkpoint, valid until ExpiresAt. The store keeps only the hash of the
// claim's token.
type UseClaim struct {
	TokenHash    string
	CheckpointID string
	Owner        string
	Org          string
	CreatedAt    time.Time
	ExpiresAt    time.Time
	// UsedAt and LeaseID are set once a fork consumed the claim.
	UsedAt  time.Time
	LeaseID string
}

// MaxOpenUseClaims bounds the unexpired, unused claims of one checkpoint.
const MaxOpenUseClaims = 16

// ForkCreate asks ForkLease for a lease started from a checkpoint.
type ForkCreate struct {
	// Create is the lease to create, as for CreateLease (AttemptID set)
	// or PutLease (RequestHash set; exactly one of them).
	Create       CreateRequest
	CheckpointID string
	// ClaimHash is the hash of the caller's use claim token.
	ClaimHash string
}

// Checkpoint errors. Test with errors.Is.
var (
	// ErrCheckpointNotReady: the checkpoint is not ready (being created,
	// deleted or failed) for what was asked.
	ErrCheckpointNotReady = errors.New("checkpoint not ready")
	// ErrCheckpointBusy: the checkpoint is still being created, or a fork
	// from it is provisioning, so it cannot be deleted yet.
	ErrCheckpointBusy = errors.New("checkpoint busy")
	// ErrClaimInvalid: a use claim is unknown, expired, for another
	// checkpoint or owner, or already used by another lease.
	ErrClaimInvalid = errors.New("checkpoint use claim invalid")
	// ErrCheckpointExists: a checkpoint with this ID exists.
	ErrCheckpointExists = errors.New("checkpoint exists")
	// ErrTooManyClaims: the checkpoint has MaxOpenUseClaims open claims.
	ErrTooManyClaims = errors.New("too many open use claims")
)

// StorageMonth is the month a GB-month storage price is for: 730 hours.
const StorageMonth = 730 * time.Hour

// CheckpointStorageUSD is what checkpoint c's artifact cost between from
// and to: SizeBytes (in GB of 10^9 bytes) times GBMonthUSD for the part of
// [ReadyAt, DeletedAt) (or [ReadyAt, to) while not deleted) inside
// [from, to), in units of StorageMonth.
func CheckpointStorageUSD(c Checkpoint, from, to time.Time) float64 {
	if c.ReadyAt.IsZero() || c.SizeBytes <= 0 || c.GBMonthUSD <= 0 {
		return 0
	}
	stop := c.DeletedAt
	if stop.IsZero() || stop.After(to) {
		stop = to
	}
	d := overlap(c.ReadyAt, stop, from, to)
	return float64(c.SizeBytes) / 1e9 * c.GBMonthUSD * (float64(d) / float64(StorageMonth))
}
