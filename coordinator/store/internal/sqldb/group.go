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

// groupQueue collects transactions while a group commits; whoever finds
// no group running leads, like heartbeatQueue.
type groupQueue struct {
	mu      gosync.Mutex
	queue   []*groupCall
	running bool
}

func (g *groupQueue) enqueue(c *groupCall) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.queue = append(g.queue, c)
	if g.running {
		return false
	}
	g.running = true
	return true
}

func (g *groupQueue) take() []*groupCall {
	g.mu.Lock()
	defer g.mu.Unlock()
	n := min(len(g.queue), maxGroup)
	batch := slices.Clone(g.queue[:n])
	g.queue = slices.Delete(g.queue, 0, n)
	return batch
}

func (g *groupQueue) handOff() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(g.queue) == 0 {
		g.running = false
		return
	}
	g.queue[0].done <- true
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
	batch := s.group.take()
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
