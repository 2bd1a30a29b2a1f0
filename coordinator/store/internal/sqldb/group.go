package sqldb

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	gosync "sync"
)

// maxGroup bounds how many transactions one group commit carries.
const maxGroup = 64

// groupCall is one transaction waiting for a group commit.
type groupCall struct {
	fn   func(tx *sql.Tx, c q) error
	done chan bool // false: answered (err set); true: lead the next group
	err  error
	// retry says the group failed as a whole: run fn on its own.
	retry bool
}

func (c *groupCall) leadChan() chan bool { return c.done }

// leaderQueue collects calls while a batch of them runs (heartbeats,
// grouped transactions). Whoever finds no batch running leads: it runs
// what is queued, answers those calls, and hands the lead to the first
// call queued meanwhile, through that call's lead channel.
type leaderQueue[C interface{ leadChan() chan bool }] struct {
	mu      gosync.Mutex
	queue   []C
	running bool
}

// enqueue queues c and reports whether c must lead now.
func (q *leaderQueue[C]) enqueue(c C) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.queue = append(q.queue, c)
	if q.running {
		return false
	}
	q.running = true
	return true
}

// take removes up to max queued calls.
func (q *leaderQueue[C]) take(max int) []C {
	q.mu.Lock()
	defer q.mu.Unlock()
	n := min(len(q.queue), max)
	batch := slices.Clone(q.queue[:n])
	q.queue = slices.Delete(q.queue, 0, n)
	return batch
}

// handOff passes the lead to the next queued call, or ends the run.
func (q *leaderQueue[C]) handOff() {
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.queue) == 0 {
		q.running = false
		return
	}
	q.queue[0].leadChan() <- true
}

// groupTx runs fn in a transaction committed together with the
// transactions of concurrent callers (Dialect.GroupCommit): each runs in
// a savepoint of one database transaction, so its error undoes only its
// own changes, and nobody hears of success before the commit. If the
// group cannot commit, every member whose fn succeeded runs again on its
// own (fn must be safe to run again, as for retries), as does a member
// that failed with a retryable error.
func (s *Store) groupTx(ctx context.Context, fn func(tx *sql.Tx, c q) error) error {
	call := &groupCall{fn: fn, done: make(chan bool, 1)}
	if s.group.enqueue(call) {
		s.leadGroup(ctx, call)
	} else if lead := <-call.done; lead {
		s.leadGroup(ctx, call)
	}
	if call.retry {
		return s.retryTx(ctx, fn)
	}
	return call.err
}

func (s *Store) leadGroup(ctx context.Context, self *groupCall) {
	batch := s.group.take(maxGroup)
	// The group answers other callers too: it must not end with this
	// caller's context.
	gctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), batchTimeout)
	defer cancel()
	err := s.commitGroup(gctx, batch)
	for _, c := range batch {
		// Nothing of a group that failed was committed: everyone runs on
		// their own, for an answer of their own.
		c.retry = err != nil || (c.err != nil && s.d.Retryable != nil && s.d.Retryable(c.err))
	}
	s.group.handOff()
	for _, c := range batch {
		if c != self {
			c.done <- false
		}
	}
}

// commitGroup runs the batch's transactions in savepoints of one
// transaction and commits it.
func (s *Store) commitGroup(ctx context.Context, batch []*groupCall) error {
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("%s: begin: %w", s.d.Name, err)
	}
	defer tx.Rollback() //nolint:errcheck // a no-op after Commit
	c := q{tx: tx, stmts: &s.wStmts, d: &s.d}
	for _, call := range batch {
		if _, err := tx.ExecContext(ctx, "SAVEPOINT member"); err != nil {
			return fmt.Errorf("%s: savepoint: %w", s.d.Name, err)
		}
		call.err = call.fn(tx, c)
		if call.err != nil {
			if _, err := tx.ExecContext(ctx, "ROLLBACK TO member"); err != nil {
				return fmt.Errorf("%s: rollback to savepoint: %w", s.d.Name, err)
			}
		}
		if _, err := tx.ExecContext(ctx, "RELEASE member"); err != nil {
			return fmt.Errorf("%s: release savepoint: %w", s.d.Name, err)
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("%s: commit: %w", s.d.Name, err)
	}
	s.wStmts.preparePending(ctx)
	return nil
}
