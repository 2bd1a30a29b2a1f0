package providertest

import (
	"context"
	"io"
	"slices"

	"github.com/crabbox-dev/crabbox/provider"
)

// Steps of a delegated backend.
const (
	StepWarmup    Step = "warmup"
	StepRun       Step = "run"
	StepStatus    Step = "status"
	StepStop      Step = "stop"
	StepWriteFile Step = "write-file"
	StepReadFile  Step = "read-file"
	StepTouchView Step = "touch-view" // DelegatedTouchBackend.Touch
	// StepList applies to delegated backends too.
)

// WithDelegatedFaults wraps a delegated backend so that each fault fires at
// its step. The wrapper implements the same optional interfaces as b
// (DelegatedFileBackend, DelegatedTouchBackend) and io.Closer. Like
// Faulty, it is not safe for concurrent use with changing faults.
func WithDelegatedFaults(b provider.DelegatedRunBackend, faults ...Fault) provider.DelegatedRunBackend {
	f := &faultyDelegated{DelegatedRunBackend: b, faults: &Faulty{faults: faults, fired: map[int]int{}}}
	_, files := b.(provider.DelegatedFileBackend)
	_, touch := b.(provider.DelegatedTouchBackend)
	switch {
	case files && touch:
		return faultyFilesTouch{faultyFiles{f}}
	case files:
		return faultyFiles{f}
	case touch:
		return faultyTouch{f}
	}
	return f
}

// faultyDelegated injects faults into the calls of a delegated backend.
type faultyDelegated struct {
	provider.DelegatedRunBackend
	faults *Faulty // only its fault bookkeeping is used
}

func (f *faultyDelegated) Close() error { return closeBackend(f.DelegatedRunBackend) }

func (f *faultyDelegated) Warmup(ctx context.Context, req provider.WarmupRequest) (provider.LeaseView, error) {
	return inject(ctx, f.faults, StepWarmup, func() (provider.LeaseView, error) { return f.DelegatedRunBackend.Warmup(ctx, req) })
}

func (f *faultyDelegated) Run(ctx context.Context, req provider.DelegatedRunRequest) (provider.DelegatedRunResult, error) {
	return inject(ctx, f.faults, StepRun, func() (provider.DelegatedRunResult, error) { return f.DelegatedRunBackend.Run(ctx, req) })
}

func (f *faultyDelegated) List(ctx context.Context, req provider.ListRequest) ([]provider.LeaseView, error) {
	return inject(ctx, f.faults, StepList, func() ([]provider.LeaseView, error) { return f.DelegatedRunBackend.List(ctx, req) })
}

func (f *faultyDelegated) Status(ctx context.Context, req provider.StatusRequest) (provider.LeaseView, error) {
	return inject(ctx, f.faults, StepStatus, func() (provider.LeaseView, error) { return f.DelegatedRunBackend.Status(ctx, req) })
}

func (f *faultyDelegated) Stop(ctx context.Context, req provider.StopRequest) error {
	_, err := inject(ctx, f.faults, StepStop, func() (struct{}, error) { return struct{}{}, f.DelegatedRunBackend.Stop(ctx, req) })
	return err
}

type faultyFiles struct{ *faultyDelegated }

func (f faultyFiles) WriteFile(ctx context.Context, req provider.WriteFileRequest) error {
	_, err := inject(ctx, f.faults, StepWriteFile, func() (struct{}, error) {
		return struct{}{}, f.DelegatedRunBackend.(provider.DelegatedFileBackend).WriteFile(ctx, req)
	})
	return err
}

func (f faultyFiles) ReadFile(ctx context.Context, req provider.ReadFileRequest) (io.ReadCloser, error) {
	return inject(ctx, f.faults, StepReadFile, func() (io.ReadCloser, error) {
		return f.DelegatedRunBackend.(provider.DelegatedFileBackend).ReadFile(ctx, req)
	})
}

type faultyTouch struct{ *faultyDelegated }

func (f faultyTouch) Touch(ctx context.Context, req provider.DelegatedTouchRequest) (provider.LeaseView, error) {
	return touchFault(ctx, f.faultyDelegated, req)
}

type faultyFilesTouch struct{ faultyFiles }

func (f faultyFilesTouch) Touch(ctx context.Context, req provider.DelegatedTouchRequest) (provider.LeaseView, error) {
	return touchFault(ctx, f.faultyDelegated, req)
}

func touchFault(ctx context.Context, f *faultyDelegated, req provider.DelegatedTouchRequest) (provider.LeaseView, error) {
	return inject(ctx, f.faults, StepTouchView, func() (provider.LeaseView, error) {
		return f.DelegatedRunBackend.(provider.DelegatedTouchBackend).Touch(ctx, req)
	})
}

// RunOnly hides the optional interfaces of a delegated backend (files,
// touch) and drops FeatureFiles from its spec: a backend that syncs the
// checkout by itself on each run, as a sandbox service without a file API
// does. It keeps b's io.Closer.
func RunOnly(b provider.DelegatedRunBackend) provider.DelegatedRunBackend { return runOnly{b} }

type runOnly struct{ b provider.DelegatedRunBackend }

func (r runOnly) Spec() provider.Spec {
	s := r.b.Spec().Clone()
	s.Features = slices.DeleteFunc(s.Features, func(f provider.Feature) bool { return f == provider.FeatureFiles })
	return s
}

func (r runOnly) Close() error { return closeBackend(r.b) }

func (r runOnly) Warmup(ctx context.Context, req provider.WarmupRequest) (provider.LeaseView, error) {
	return r.b.Warmup(ctx, req)
}

func (r runOnly) Run(ctx context.Context, req provider.DelegatedRunRequest) (provider.DelegatedRunResult, error) {
	return r.b.Run(ctx, req)
}

func (r runOnly) List(ctx context.Context, req provider.ListRequest) ([]provider.LeaseView, error) {
	return r.b.List(ctx, req)
}

func (r runOnly) Status(ctx context.Context, req provider.StatusRequest) (provider.LeaseView, error) {
	return r.b.Status(ctx, req)
}

func (r runOnly) Stop(ctx context.Context, req provider.StopRequest) error { return r.b.Stop(ctx, req) }

func closeBackend(b provider.Backend) error {
	if c, ok := b.(io.Closer); ok {
		return c.Close()
	}
	return nil
}
