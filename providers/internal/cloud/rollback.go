package cloud

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"
)

// Step names one step of a cloud acquire. Errors name the step that
// failed (StepError), and rollback tests are a matrix over the steps.
type Step string

// The steps of a cloud acquire, in order. Not every cloud has every step.
const (
	StepKey     Step = "key"     // upload the lease's public key to the cloud
	StepCreate  Step = "create"  // create the server with labels and user data
	StepAddress Step = "address" // wait until the server has a public address
	StepSSH     Step = "ssh"     // wait until sshd answers with the pinned host key
	StepLabel   Step = "label"   // label the server ready
)

// Steps lists the acquire steps in order.
func Steps() []Step { return []Step{StepKey, StepCreate, StepAddress, StepSSH, StepLabel} }

// StepError is the failure of one acquire step.
type StepError struct {
	Step Step
	Err  error
}

func (e *StepError) Error() string { return fmt.Sprintf("%s: %v", e.Step, e.Err) }

// Unwrap returns the step's error.
func (e *StepError) Unwrap() error { return e.Err }

// Failed wraps err as the failure of step; nil stays nil.
func Failed(step Step, err error) error {
	if err == nil {
		return nil
	}
	return &StepError{Step: step, Err: err}
}

// FailedStep returns the step whose failure err is (or wraps), if any.
func FailedStep(err error) (Step, bool) {
	var se *StepError
	if errors.As(err, &se) {
		return se.Step, true
	}
	return "", false
}

// DefaultRollbackTimeout bounds a rollback, which runs even after the
// caller's context is done.
const DefaultRollbackTimeout = 2 * time.Minute

// Rollback is the undo stack of one acquire. Each step that creates a
// resource pushes how to delete it; if the acquire fails, or its context
// is cancelled, Finish runs the stack in reverse. It is not safe for
// concurrent use.
type Rollback struct {
	log     *slog.Logger
	timeout time.Duration
	undo    []undo
}

type undo struct {
	step     Step
	resource string
	fn       func(context.Context) error
}

// NewRollback returns an empty undo stack. log may be nil; timeout zero
// means DefaultRollbackTimeout.
func NewRollback(log *slog.Logger, timeout time.Duration) *Rollback {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if timeout <= 0 {
		timeout = DefaultRollbackTimeout
	}
	return &Rollback{log: log, timeout: timeout}
}

// Add pushes the deletion of resource (a description such as "server 42"),
// created by step.
func (r *Rollback) Add(step Step, resource string, fn func(ctx context.Context) error) {
	r.undo = append(r.undo, undo{step: step, resource: resource, fn: fn})
}

// Len is the number of deletions on the stack.
func (r *Rollback) Len() int { return len(r.undo) }

// Run deletes everything on the stack, last created first, under a fresh
// context bounded by the rollback timeout (ctx's values are kept, its
// cancellation is not). It runs every deletion even when one fails, empties
// the stack and returns the failures joined.
func (r *Rollback) Run(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.timeout)
	defer cancel()
	var errs []error
	for i := len(r.undo) - 1; i >= 0; i-- {
		u := r.undo[i]
		if err := u.fn(ctx); err != nil {
			r.log.Warn("rollback failed", "step", string(u.step), "resource", u.resource, "err", err)
			errs = append(errs, fmt.Errorf("roll back %s (%s): %w", u.resource, u.step, err))
			continue
		}
		r.log.Info("rolled back", "step", string(u.step), "resource", u.resource)
	}
	r.undo = nil
	return errors.Join(errs...)
}

// Finish is deferred by Acquire with a pointer to its named error result.
// When *errp is set, or ctx is done (the caller gave up, so the box must
// not outlive the call), it runs the stack and joins its failures into
// *errp. Otherwise it drops the stack: the resources are the lease's now.
func (r *Rollback) Finish(ctx context.Context, errp *error) {
	if *errp == nil && ctx.Err() != nil {
		*errp = fmt.Errorf("acquire abandoned: %w", context.Cause(ctx))
	}
	if *errp == nil {
		r.undo = nil
		return
	}
	if err := r.Run(ctx); err != nil {
		*errp = errors.Join(*errp, err)
	}
}
