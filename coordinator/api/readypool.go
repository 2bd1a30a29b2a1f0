package api

import (
	"time"

	"github.com/crabbox-dev/crabbox/lease"
)

// Ready pools: boxes a coordinator creates ahead of demand and hands out at
// once. A pool is keyed by an admin-chosen name and matches creates by
// provider, class, server type, image, location and org. Every route under
// /v1/ready-pools is admin-only; creates take from a pool through
// POST /v1/leases (LeaseRequest.Pool, or a request that matches a pool).

// Ready pool limits.
const (
	// MaxPoolKeyLen bounds a pool key.
	MaxPoolKeyLen = 63
	// MaxPoolBoxes bounds a pool's Max (and every Target).
	MaxPoolBoxes = 1000
	// DefaultPoolMaxAgeSeconds is how long an idle pool box is kept
	// unless the pool says otherwise; MinPoolMaxAgeSeconds and
	// MaxPoolMaxAgeSeconds bound it.
	DefaultPoolMaxAgeSeconds = 6 * 3600
	MinPoolMaxAgeSeconds     = 300
	MaxPoolMaxAgeSeconds     = 7 * 86400
	// MaxPoolScheduleEntries bounds a pool's schedule.
	MaxPoolScheduleEntries = 32
)

// PoolAny in LeaseRequest.Pool takes a box from any ready pool the create
// matches. A create that names no pool takes from a matching one only when
// it leaves the lease ID to the coordinator: a pool's box keeps the lease
// ID it was made with, which a client that minted its own would not
// expect.
const PoolAny = "*"

// Ready pool error codes.
const (
	// CodePoolExhausted (429): the create named (or matched) an exclusive
	// pool with no ready box.
	CodePoolExhausted = "pool_exhausted"
	// CodePoolMismatch (400): the create named a pool whose provider,
	// class, image or location differ from what it asked for.
	CodePoolMismatch = "pool_mismatch"
)

// IsPoolKey reports whether s is a well-formed pool key (at most
// MaxPoolKeyLen characters of [a-z0-9-], not starting with a dash): the
// same keys a local pool takes, whose key is also a file name.
func IsPoolKey(s string) bool { return lease.ValidPoolKey(s) }

// PoolScheduleEntry sets a pool's target during part of the week: on Days
// (lowercase three-letter names: "mon".."sun"; empty means every day),
// from StartHour (inclusive) to EndHour (exclusive), UTC, 0-24. The first
// entry that covers an instant wins; outside every entry the pool's
// Target applies.
type PoolScheduleEntry struct {
	Days      []string `json:"days,omitempty"`
	StartHour int      `json:"startHour"`
	EndHour   int      `json:"endHour"`
	Target    int      `json:"target"`
}

// ReadyPoolSpec is the body of PUT /v1/ready-pools/{key}: what a pool
// holds. Provider is required; the key comes from the path.
type ReadyPoolSpec struct {
	Provider   string   `json:"provider"`
	Class      string   `json:"class,omitempty"`
	ServerType string   `json:"serverType,omitempty"`
	Image      ImageRef `json:"image,omitempty"`
	Location   string   `json:"location,omitempty"`
	// Org is the org whose creates the pool serves and whose spend its
	// idle boxes count against; empty: the coordinator's default org.
	Org string `json:"org,omitempty"`
	// Target is how many ready boxes the pool keeps (outside Schedule).
	Target int `json:"target"`
	// Max bounds the pool's boxes, ready and being made (0: Target, or the
	// largest scheduled target).
	Max int `json:"max,omitempty"`
	// MaxAgeSeconds is how long an idle box is kept before it is replaced
	// (0: DefaultPoolMaxAgeSeconds).
	MaxAgeSeconds int64               `json:"maxAgeSeconds,omitempty"`
	Schedule      []PoolScheduleEntry `json:"schedule,omitempty"`
	// Exclusive: a create that names or matches the pool and finds no
	// ready box fails with 429 pool_exhausted instead of creating a box
	// the ordinary way.
	Exclusive bool `json:"exclusive,omitempty"`
}

// ReadyPoolBox is one box of a pool, not yet handed out.
type ReadyPoolBox struct {
	LeaseID   string    `json:"leaseID"`
	State     string    `json:"state"` // provisioning, ready
	CloudID   string    `json:"cloudID,omitempty"`
	Host      string    `json:"host,omitempty"`
	CreatedAt time.Time `json:"createdAt"`
	ReadyAt   time.Time `json:"readyAt,omitzero"`
}

// ReadyPool is a pool and its current state.
type ReadyPool struct {
	Key string `json:"key"`
	ReadyPoolSpec
	// CurrentTarget is the target now (Schedule applied).
	CurrentTarget int `json:"currentTarget"`
	// Ready and Provisioning count the pool's boxes by state.
	Ready        int `json:"ready"`
	Provisioning int `json:"provisioning"`
	// TakenTotal counts the boxes handed out since the pool was made.
	TakenTotal int64 `json:"takenTotal"`
	// IdleHourlyUSD is the estimated cost per hour of the pool's idle
	// boxes, counted against the pool's org.
	IdleHourlyUSD float64        `json:"idleHourlyUSD"`
	LastError     string         `json:"lastError,omitempty"`
	CreatedAt     time.Time      `json:"createdAt"`
	UpdatedAt     time.Time      `json:"updatedAt"`
	Boxes         []ReadyPoolBox `json:"boxes,omitempty"`
}

// ReadyPoolResponse answers GET, PUT and DELETE /v1/ready-pools/{key} and
// POST /v1/ready-pools/{key}/reconcile.
type ReadyPoolResponse struct {
	Pool ReadyPool `json:"pool"`
}

// ReadyPoolsResponse answers GET /v1/ready-pools.
type ReadyPoolsResponse struct {
	Pools []ReadyPool `json:"pools"`
}
