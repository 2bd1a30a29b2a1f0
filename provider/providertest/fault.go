package providertest

import (
	"context"
	"fmt"
	"io"

	"github.com/crabbox-dev/crabbox/provider"
)

// Step names a call of an SSH-lease backend.
type Step string

const (
	StepAcquire Step = "acquire"
	StepResolve Step = "resolve"
	StepList    Step = "list"
	StepTouch   Step = "touch"
	StepRelease Step = "release"
)

// Fault is a failure injected at one step.
type Fault struct {
	Step Step
	// Err is returned by the step. Nil means ErrInjected.
	Err error
	// Hang makes the step block until its context is done, then return the
	// context's error.
	Hang bool
	// OnHang, if set, is called when a hang starts (a test cancels the
	// caller's context from it instead of waiting for a deadline).
	OnHang func()
	// AfterCall lets the real call happen first, then fails or hangs: the
	// provider did its work but the caller never learns of it, as when a
	// process dies or a network answer is lost.
	AfterCall bool
	// Times limits how often the fault fires; 0 means every time.
	Times int
}

// ErrInjected is the error a Fault returns when it has no Err of its own.
var ErrInjected = fmt.Errorf("providertest: injected failure: %w", provider.ErrTransient)

// Faulty wraps an SSH-lease backend and injects faults at chosen steps. It
// keeps any optional interfaces of the wrapped backend reachable through
// Unwrap; it is not safe for concurrent use with changing faults.
type Faulty struct {
	provider.SSHLeaseBackend
	faults []Fault
	fired  map[int]int
}

// WithFaults wraps b so that each fault fires at its step.
func WithFaults(b provider.SSHLeaseBackend, faults ...Fault) *Faulty {
	return &Faulty{SSHLeaseBackend: b, faults: faults, fired: map[int]int{}}
}

// Close closes the wrapped backend if it implements io.Closer, so that a
// wrapped backend keeps its io.Closer duty (see provider.Backend).
func (f *Faulty) Close() error {
	if c, ok := f.SSHLeaseBackend.(io.Closer); ok {
		return c.Close()
	}
	return nil
}

// Unwrap returns the wrapped backend.
func (f *Faulty) Unwrap() provider.SSHLeaseBackend { return f.SSHLeaseBackend }

func (f *Faulty) fault(step Step) (Fault, bool) {
	for i, ft := range f.faults {
		if ft.Step != step || (ft.Times > 0 && f.fired[i] >= ft.Times) {
			continue
		}
		f.fired[i]++
		if ft.Err == nil {
			ft.Err = ErrInjected
		}
		return ft, true
	}
	return Fault{}, false
}

// inject runs call under the fault for step, if any.
func inject[T any](ctx context.Context, f *Faulty, step Step, call func() (T, error)) (T, error) {
	ft, ok := f.fault(step)
	if !ok {
		return call()
	}
	var zero T
	if ft.AfterCall {
		if _, err := call(); err != nil {
			return zero, err
		}
	}
	if ft.Hang {
		if ft.OnHang != nil {
			ft.OnHang()
		}
		<-ctx.Done()
		return zero, ctx.Err()
	}
	return zero, ft.Err
}

func (f *Faulty) Acquire(ctx context.Context, req provider.AcquireRequest) (provider.LeaseTarget, error) {
	return inject(ctx, f, StepAcquire, func() (provider.LeaseTarget, error) { return f.SSHLeaseBackend.Acquire(ctx, req) })
}

func (f *Faulty) Resolve(ctx context.Context, req provider.ResolveRequest) (provider.LeaseTarget, error) {
	return inject(ctx, f, StepResolve, func() (provider.LeaseTarget, error) { return f.SSHLeaseBackend.Resolve(ctx, req) })
}

func (f *Faulty) List(ctx context.Context, req provider.ListRequest) ([]provider.LeaseTarget, error) {
	return inject(ctx, f, StepList, func() ([]provider.LeaseTarget, error) { return f.SSHLeaseBackend.List(ctx, req) })
}

func (f *Faulty) Touch(ctx context.Context, req provider.TouchRequest) (provider.LeaseTarget, error) {
	return inject(ctx, f, StepTouch, func() (provider.LeaseTarget, error) { return f.SSHLeaseBackend.Touch(ctx, req) })
}

func (f *Faulty) ReleaseLease(ctx context.Context, req provider.ReleaseRequest) error {
	_, err := inject(ctx, f, StepRelease, func() (struct{}, error) { return struct{}{}, f.SSHLeaseBackend.ReleaseLease(ctx, req) })
	return err
}

// Steps of a native checkpoint backend.
const (
	StepCheckpoint       Step = "checkpoint"
	StepListCheckpoints  Step = "list-checkpoints"
	StepDeleteCheckpoint Step = "delete-checkpoint"
	StepFork             Step = "fork"
	StepRestore          Step = "restore"
)

// FaultyNative is Faulty for a native checkpoint backend: it injects
// faults at the checkpoint steps too, and is a provider.NativeForkBackend
// and a provider.NativeRestoreBackend whose Fork and Restore fail when the
// wrapped backend is not one.
type FaultyNative struct {
	*Faulty
	native provider.NativeCheckpointBackend
}

// WithNativeFaults wraps b so that each fault fires at its step.
func WithNativeFaults(b provider.NativeCheckpointBackend, faults ...Fault) *FaultyNative {
	return &FaultyNative{Faulty: WithFaults(b, faults...), native: b}
}

func (f *FaultyNative) CreateCheckpoint(ctx context.Context, req provider.CheckpointRequest) (provider.CheckpointArtifact, error) {
	return inject(ctx, f.Faulty, StepCheckpoint, func() (provider.CheckpointArtifact, error) { return f.native.CreateCheckpoint(ctx, req) })
}

func (f *FaultyNative) ListCheckpoints(ctx context.Context, req provider.CheckpointListRequest) ([]provider.CheckpointArtifact, error) {
	return inject(ctx, f.Faulty, StepListCheckpoints, func() ([]provider.CheckpointArtifact, error) { return f.native.ListCheckpoints(ctx, req) })
}

func (f *FaultyNative) DeleteCheckpoint(ctx context.Context, req provider.CheckpointDeleteRequest) error {
	_, err := inject(ctx, f.Faulty, StepDeleteCheckpoint, func() (struct{}, error) { return struct{}{}, f.native.DeleteCheckpoint(ctx, req) })
	return err
}

func (f *FaultyNative) Fork(ctx context.Context, req provider.ForkRequest) (provider.LeaseTarget, error) {
	fb, ok := f.native.(provider.NativeForkBackend)
	if !ok {
		return provider.LeaseTarget{}, fmt.Errorf("providertest: %s cannot fork", f.Spec().Name)
	}
	return inject(ctx, f.Faulty, StepFork, func() (provider.LeaseTarget, error) { return fb.Fork(ctx, req) })
}

func (f *FaultyNative) Restore(ctx context.Context, req provider.RestoreRequest) (provider.LeaseTarget, error) {
	rb, ok := f.native.(provider.NativeRestoreBackend)
	if !ok {
		return provider.LeaseTarget{}, fmt.Errorf("providertest: %s cannot restore", f.Spec().Name)
	}
	return inject(ctx, f.Faulty, StepRestore, func() (provider.LeaseTarget, error) { return rb.Restore(ctx, req) })
}
