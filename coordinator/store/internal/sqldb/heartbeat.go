package sqldb

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/crabbox-dev/crabbox/coordinator/store"
)

// heartbeatUpdate touches a live, unexpired, unclaimed lease in one
// statement and returns it: $1 id, $2 now, $3 new idle timeout (0 keeps
// it), $4 telemetry (empty keeps it), $5 expected provider, $6 and $7
// owner and org (empty for any). The expiry is store.ExpiresAt in SQL.
var heartbeatUpdate = func() string {
	idle := "(CASE WHEN CAST($3 AS BIGINT) > 0 THEN CAST($3 AS BIGINT) ELSE idle_timeout_seconds END)"
	now := "CAST($2 AS BIGINT)"
	tel := "CAST($4 AS TEXT)"
	return `UPDATE leases SET last_touched_at = ` + now + `, updated_at = ` + now + `,
		idle_timeout_seconds = ` + idle + `,
		expires_at = CASE WHEN lifecycle = 'registered'
			THEN ` + now + ` + (CASE WHEN ttl_seconds < ` + idle + ` THEN ttl_seconds ELSE ` + idle + ` END) * 1000000
			ELSE (CASE WHEN created_at + ttl_seconds * 1000000 < ` + now + ` + ` + idle + ` * 1000000
				THEN created_at + ttl_seconds * 1000000 ELSE ` + now + ` + ` + idle + ` * 1000000 END) END,
		telemetry = CASE WHEN ` + tel + ` <> '' THEN ` + tel + ` ELSE telemetry END,
		telemetry_at = CASE WHEN ` + tel + ` <> '' THEN ` + now + ` ELSE telemetry_at END
		WHERE id = $1 AND state IN ('provisioning', 'active') AND expires_at > ` + now + ` AND cleanup_token = ''
			AND (CAST($5 AS TEXT) = '' OR provider = CAST($5 AS TEXT))
			AND (CAST($6 AS TEXT) = '' OR (owner = CAST($6 AS TEXT) AND org = CAST($7 AS TEXT)))
		RETURNING ` + strings.Join(leaseColumns, ", ")
}()

// maxHeartbeatBatch bounds how many heartbeats one transaction commits.
const maxHeartbeatBatch = 128

// batchTimeout bounds one group commit (of heartbeats or transactions).
const batchTimeout = 30 * time.Second

// Heartbeat implements store.Store: one UPDATE ... RETURNING when the
// heartbeat succeeds; only a refused one reads the lease again to say why.
// Concurrent heartbeats are committed together (group commit): the first
// caller commits everything queued meanwhile in one transaction, so the
// database writes its log once for the lot.
func (s *Store) Heartbeat(ctx context.Context, id string, req store.HeartbeatRequest) (store.Lease, error) {
	switch {
	case id == "":
		return store.Lease{}, invalid("empty lease id")
	case req.Now.IsZero():
		return store.Lease{}, invalid("zero time")
	case req.IdleTimeoutSeconds < 0:
		return store.Lease{}, invalid("lease %q: negative idle timeout", id)
	case len(req.Telemetry) > store.MaxTelemetryBytes:
		return store.Lease{}, invalid("lease %q: telemetry of %d bytes, more than %d", id, len(req.Telemetry), store.MaxTelemetryBytes)
	}
	call := &heartbeatCall{id: id, req: req, done: make(chan bool, 1)}
	if s.heartbeats.enqueue(call) {
		s.leadHeartbeats(ctx, call)
	} else if lead := <-call.done; lead {
		s.leadHeartbeats(ctx, call)
	}
	switch {
	case call.err != nil:
		return store.Lease{}, call.err
	case !call.found:
		return store.Lease{}, s.whyNoHeartbeat(ctx, id, req)
	}
	return call.lease, nil
}

// heartbeatCall is one queued heartbeat and, once done, its outcome.
type heartbeatCall struct {
	id   string
	req  store.HeartbeatRequest
	done chan bool // receives false when answered, true when it must lead

	lease store.Lease
	found bool
	err   error
}

func (c *heartbeatCall) leadChan() chan bool { return c.done }

// leadHeartbeats commits one batch (which includes self) and answers it.
func (s *Store) leadHeartbeats(ctx context.Context, self *heartbeatCall) {
	batch := s.heartbeats.take(maxHeartbeatBatch)
	// The batch answers other callers too: it must not end with this
	// caller's context.
	bctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), batchTimeout)
	defer cancel()
	s.commitHeartbeats(bctx, batch)
	s.heartbeats.handOff()
	for _, c := range batch {
		if c != self {
			c.done <- false
		}
	}
}

// commitHeartbeats runs the batch in one transaction; if that fails, each
// heartbeat runs on its own so one cannot fail another.
func (s *Store) commitHeartbeats(ctx context.Context, batch []*heartbeatCall) {
	if len(batch) > 1 {
		// Lock rows in ID order, so batches of two replicas cannot
		// deadlock.
		sorted := slices.SortedFunc(slices.Values(batch), func(a, b *heartbeatCall) int { return strings.Compare(a.id, b.id) })
		err := s.tx(ctx, func(_ *sql.Tx, c q) error {
			for _, call := range sorted {
				call.lease, call.found, call.err = s.heartbeatRow(ctx, c, call)
				if call.err != nil {
					return call.err
				}
			}
			return nil
		})
		if err == nil {
			return
		}
	}
	w := q{stmts: &s.wStmts, d: &s.d}
	for _, call := range batch {
		for attempt := 0; ; attempt++ {
			call.lease, call.found, call.err = s.heartbeatRow(ctx, w, call)
			if call.err == nil || attempt == 5 || s.d.Retryable == nil || !s.d.Retryable(call.err) {
				break
			}
		}
	}
}

// heartbeatRow runs the heartbeat update of one call in c.
func (s *Store) heartbeatRow(ctx context.Context, c q, call *heartbeatCall) (store.Lease, bool, error) {
	req := call.req
	r, err := scanLease(c.row(ctx, heartbeatUpdate, call.id, ts(req.Now), req.IdleTimeoutSeconds,
		string(req.Telemetry), req.ExpectedProvider, req.Owner, req.Org))
	switch {
	case err == nil:
		return r.Lease, true, nil
	case errors.Is(err, sql.ErrNoRows):
		return store.Lease{}, false, nil
	default:
		return store.Lease{}, false, fmt.Errorf("%s: heartbeat lease %q: %w", s.d.Name, call.id, err)
	}
}

// whyNoHeartbeat explains why the heartbeat update touched no row.
func (s *Store) whyNoHeartbeat(ctx context.Context, id string, req store.HeartbeatRequest) error {
	r, err := s.getLease(ctx, s.reader(), id, false)
	switch {
	case err != nil:
		return err
	case req.Owner != "" && (r.Owner != req.Owner || r.Org != req.Org):
		return fmt.Errorf("lease %q: %w", id, store.ErrNotFound)
	case req.ExpectedProvider != "" && req.ExpectedProvider != r.Provider:
		return fmt.Errorf("lease %q is provider %q, not %q: %w", id, r.Provider, req.ExpectedProvider, store.ErrProviderMismatch)
	case !r.State.Live():
		return fmt.Errorf("lease %q is %s: %w", id, r.State, store.ErrLeaseEnded)
	case r.CleanupToken != "":
		// Another coordinator, whose clock may run ahead, is already
		// deleting it.
		return fmt.Errorf("lease %q is being cleaned up: %w", id, store.ErrLeaseExpired)
	default:
		return fmt.Errorf("lease %q expired at %s: %w", id, r.ExpiresAt.Format(time.RFC3339), store.ErrLeaseExpired)
	}
}
