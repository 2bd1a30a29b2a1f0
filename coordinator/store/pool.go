package store

import (
	"errors"
	"time"
)

// Ready pools. A pool is a definition (Pool) and its boxes: managed leases
// with Lease.Pool set to the pool's key, owned by PoolOwner(key) in the
// pool's org until one is taken. An idle pool box is provisioning while
// its provider makes it and ready once it is active; a take moves a ready
// box to its new owner in two steps, so that no box is ever handed out
// twice and none is handed out unchecked:
//
//  1. ReservePoolLease picks one ready box of the pool and reserves it for
//     one caller (a fencing token, for a short hold). No other caller can
//     reserve or take it meanwhile.
//  2. The coordinator checks the box and installs the new owner's key,
//     outside any transaction, then CommitPoolTake hands it over: owner,
//     org, slug, labels, terms, create attempt. A box whose check failed is
//     ended with FailLease (deletion queued); a reservation that lapsed (its
//     holder died) is never handed out: ClaimForCleanup deletes the box.

// PoolOwnerPrefix starts the owner of an idle pool box: "pool:" + key.
const PoolOwnerPrefix = "pool:"

// PoolOwner is the owner recorded on pool key's idle boxes.
func PoolOwner(key string) string { return PoolOwnerPrefix + key }

// PoolScheduleEntry sets a pool's target on Days (time.Weekday values;
// empty: every day) from StartHour to EndHour (UTC, 0-24, end exclusive).
type PoolScheduleEntry struct {
	Days      []time.Weekday
	StartHour int
	EndHour   int
	Target    int
}

// Pool is a ready pool's definition and counters.
type Pool struct {
	Key        string
	Provider   string
	Class      string
	ServerType string
	Image      string
	Location   string
	Org        string
	// Target is the number of ready boxes kept outside Schedule; Max bounds
	// the pool's idle boxes (provisioning and ready); 0 sets no bound
	// beyond the want AddPoolLease is given.
	Target        int
	Max           int
	MaxAgeSeconds int64
	Schedule      []PoolScheduleEntry
	Exclusive     bool
	// TakenTotal counts the commits of takes (CommitPoolTake).
	TakenTotal int64
	// LastError is the latest refill failure, set by SetPoolError and
	// cleared by a successful one.
	LastError string
	CreatedAt time.Time
	// UpdatedAt is the last change of the definition (PutPool) or of
	// LastError.
	UpdatedAt time.Time
}

// TargetAt is the pool's target at t: the first schedule entry covering t,
// else Target.
func (p Pool) TargetAt(t time.Time) int {
	t = t.UTC()
	for _, e := range p.Schedule {
		if e.covers(t) {
			return e.Target
		}
	}
	return p.Target
}

func (e PoolScheduleEntry) covers(t time.Time) bool {
	if len(e.Days) > 0 {
		found := false
		for _, d := range e.Days {
			found = found || d == t.Weekday()
		}
		if !found {
			return false
		}
	}
	h := t.Hour()
	return h >= e.StartHour && h < e.EndHour
}

// PoolCounts are a pool's idle boxes by state.
type PoolCounts struct {
	Provisioning int
	Ready        int
	// Reserved boxes are ready ones a take holds right now (not counted in
	// Ready).
	Reserved int
	// IdleHourlyUSD sums the EstimatedHourlyUSD of the idle boxes.
	IdleHourlyUSD float64
}

// PoolAdd asks AddPoolLease for a new idle box of a pool.
type PoolAdd struct {
	// Lease is the new provisioning record, filled like a CreateRequest's
	// (its Pool, Owner and Org are set by the store from the pool).
	Lease  Lease
	Limits Limits
	Now    time.Time
}

// PoolReservation is a ready box reserved for one take.
type PoolReservation struct {
	Lease Lease
	// Token fences the take: CommitPoolTake needs it. A take that gives
	// up ends the box (FailLease); one that dies lets the reservation
	// lapse (ClaimForCleanup then claims the box).
	Token string
}

// PoolTake commits a take: what the new owner's lease becomes.
type PoolTake struct {
	LeaseID string
	Token   string
	// Owner, Org, Slug, Labels, TTLSeconds, IdleTimeoutSeconds, Keep and
	// MaxEstimatedUSD replace the box's (its EstimatedHourlyUSD, the
	// price of its server, stays); its terms run from Now as a fresh
	// lease's would (created at Now).
	Owner, Org         string
	Slug               string
	Labels             map[string]string
	TTLSeconds         int64
	IdleTimeoutSeconds int64
	Keep               bool
	MaxEstimatedUSD    float64
	// AttemptID binds the take to a create attempt (POST), or RequestHash
	// to a fixed-ID request (exactly one is set); a replay of either
	// returns the lease.
	AttemptID   string
	RequestHash string
	Limits      Limits
	Now         time.Time
}

// Pool errors.
var (
	// ErrPoolEmpty: the pool has no ready box to reserve.
	ErrPoolEmpty = errors.New("pool has no ready box")
	// ErrPoolFull: the pool already holds Max idle boxes (or its target).
	ErrPoolFull = errors.New("pool is full")
)
