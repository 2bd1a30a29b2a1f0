package external

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"time"

	"github.com/crabbox-dev/crabbox/provider"
)

// MaxRequestBytes bounds the one request a program reads.
const MaxRequestBytes = 1 << 20

// Serve is the program side of the protocol for a provider linked into
// the program: it reads one request from in, configures p with the
// request's config (merged with p's defaults), performs the operation and
// writes one response to out. It is what a provider program's main calls
// (see Plugin, the crabbox side).
//
// A failed operation is a response with error and errorKind (the
// provider's portable error kind), not an error of Serve: Serve returns
// an error only when it could not write its response. Cancelling ctx (the
// program was asked to stop) cancels the operation, which rolls back what
// it made as it would in-process.
//
// SSH-lease and delegated-run providers are served; a delegated
// provider's run writes its output as run lines (see RunEvent) instead
// of one response, and its write-file chunks are staged in the state
// directory until the last (its WriteFile takes whole files). A backend
// that implements
// io.Closer is closed before Serve returns. The native checkpoint
// operations (checkpoint-create, checkpoint-list, checkpoint-delete, fork,
// restore) are answered for a backend that implements
// provider.NativeCheckpointBackend (NativeForkBackend, NativeRestoreBackend)
// and whose spec declares the feature, and refused with an error of kind
// precondition otherwise; capabilities says which.
func Serve(ctx context.Context, p provider.Provider, rt provider.Runtime, in io.Reader, out io.Writer) error {
	resp, streamed := serve(ctx, p, rt.WithDefaults(), in, out)
	if streamed {
		return nil // a run wrote its output lines itself
	}
	resp.ProtocolVersion = ProtocolVersion
	body, err := json.Marshal(resp)
	if err != nil {
		return fmt.Errorf("encode response: %w", err)
	}
	if _, err := out.Write(append(body, '\n')); err != nil {
		return fmt.Errorf("write response: %w", err)
	}
	return nil
}

// serve answers one request; a delegated provider's run writes its own
// output lines to out and returns streamed true.
func serve(ctx context.Context, p provider.Provider, rt provider.Runtime, in io.Reader, out io.Writer) (resp Response, streamed bool) {
	req, err := readRequest(in)
	if err != nil {
		return failure(err), false
	}
	if err := checkRequest(req); err != nil {
		return failure(err), false
	}
	spec := p.Spec()
	var raw provider.Config
	if len(req.Config) > 0 && string(req.Config) != "null" {
		if err := json.Unmarshal(req.Config, &raw); err != nil {
			return failure(fmt.Errorf("request field config: want an object of strings: %w", jsonError(err))), false
		}
	}
	cfg, err := spec.Resolve(raw)
	if err != nil {
		return failure(err), false
	}
	if rt.StateDir == "" {
		rt.StateDir = req.StateDir
	}
	b, err := p.Configure(cfg, rt)
	if err != nil {
		return failure(err), false
	}
	if c, ok := b.(io.Closer); ok {
		defer c.Close()
	}
	if db, ok := b.(provider.DelegatedRunBackend); ok && spec.Kind == provider.KindDelegatedRun {
		switch req.Operation {
		case OpCheckpointCreate, OpCheckpointList, OpCheckpointDelete, OpFork, OpRestore:
			return failure(fmt.Errorf("provider %s is a %s provider: it has no native checkpoints: %w", spec.Name, spec.Kind, provider.ErrPrecondition)), false
		}
		return delegatedServer{b: db, spec: spec, rt: rt}.serve(ctx, req, out)
	}
	sb, ok := b.(provider.SSHLeaseBackend)
	if !ok {
		return failure(fmt.Errorf("provider %s is a %s provider; a provider program serves only %s and %s providers", spec.Name, spec.Kind, provider.KindSSHLease, provider.KindDelegatedRun)), false
	}
	s := server{b: sb, spec: spec, rt: rt}
	switch req.Operation {
	case OpCapabilities:
		return Response{Capabilities: s.capabilities()}, false
	case OpDoctor:
		return doctorResponse(ctx, s.b, s.spec), false
	case OpAcquire:
		return s.acquire(ctx, req), false
	case OpResolve:
		return s.resolve(ctx, req), false
	case OpList:
		return s.list(ctx), false
	case OpTouch:
		return s.touch(ctx, req), false
	case OpRelease:
		return s.release(ctx, req), false
	case OpCheckpointCreate, OpCheckpointList, OpCheckpointDelete, OpFork, OpRestore:
		return s.checkpointOp(ctx, req), false
	case OpRun, OpWriteFile, OpReadFile:
		return failure(fmt.Errorf("provider %s is an %s provider: operation %s is a delegated provider's: %w", spec.Name, spec.Kind, req.Operation, provider.ErrPrecondition)), false
	default: // OpCleanup; checkRequest refused the rest
		return s.cleanup(ctx, req), false
	}
}

// checkRequest refuses, before anything is configured, an operation Serve
// does not serve and one missing the field it needs.
func checkRequest(req Request) error {
	switch req.Operation {
	case "":
		return errors.New("request field operation is missing")
	case OpCapabilities, OpDoctor, OpList, OpCleanup:
		return nil
	case OpAcquire:
		if req.Desired == nil {
			return errors.New("request field desired is missing")
		}
	case OpResolve:
		if req.ID == "" {
			return errors.New("request field id is missing")
		}
	case OpTouch, OpRelease:
		if req.Lease == nil {
			return errors.New("request field lease is missing")
		}
	case OpCheckpointList:
		return nil
	case OpRun, OpWriteFile, OpReadFile:
		return checkDelegatedRequest(req)
	case OpCheckpointCreate:
		if req.Lease == nil || req.Checkpoint == nil {
			return errors.New("request fields lease and checkpoint are required")
		}
	case OpCheckpointDelete:
		if req.Artifact == nil {
			return errors.New("request field artifact is missing")
		}
	case OpFork:
		if req.Desired == nil || req.Artifact == nil {
			return errors.New("request fields desired and artifact are required")
		}
	case OpRestore:
		if req.Lease == nil || req.Artifact == nil {
			return errors.New("request fields lease and artifact are required")
		}
	default:
		return fmt.Errorf("operation %q is not supported by a provider program", req.Operation)
	}
	return nil
}

// readRequest decodes exactly one JSON object of the protocol's version.
func readRequest(in io.Reader) (Request, error) {
	data, err := io.ReadAll(io.LimitReader(in, MaxRequestBytes+1))
	if err != nil {
		return Request{}, fmt.Errorf("read request: %w", err)
	}
	if len(data) > MaxRequestBytes {
		return Request{}, fmt.Errorf("request is larger than %d bytes", MaxRequestBytes)
	}
	var req Request
	if err := json.Unmarshal(data, &req); err != nil {
		return Request{}, fmt.Errorf("malformed request: %w", jsonError(err))
	}
	if req.ProtocolVersion != ProtocolVersion {
		return Request{}, fmt.Errorf("request field protocolVersion is %d, want %d", req.ProtocolVersion, ProtocolVersion)
	}
	return req, nil
}

// failure is the response reporting err, with its portable kind.
func failure(err error) Response {
	r := Response{Error: err.Error()}
	for _, name := range slices.Sorted(maps.Keys(errorKinds)) {
		if errors.Is(err, errorKinds[name]) {
			r.ErrorKind = name // the first in name order, the same every time
			break
		}
	}
	return r
}

type server struct {
	b    provider.SSHLeaseBackend
	spec provider.Spec
	rt   provider.Runtime
}

// doctorResponse answers doctor with b's own checks.
func doctorResponse(ctx context.Context, b provider.Backend, spec provider.Spec) Response {
	d, ok := b.(provider.DoctorBackend)
	if !ok {
		return Response{Message: "provider " + spec.Name + " has no checks"}
	}
	checks, err := d.Doctor(ctx)
	if err != nil {
		return failure(err)
	}
	if checks == nil {
		checks = []provider.Check{}
	}
	return Response{Checks: checks}
}

func (s server) acquire(ctx context.Context, req Request) Response {
	t, err := s.b.Acquire(ctx, acquireRequest(req.Desired, req.Keep))
	return s.acquired(t, err)
}

// acquired is the response to an acquire or fork that returned t, err.
func (s server) acquired(t provider.LeaseTarget, err error) Response {
	if err != nil {
		return failure(err)
	}
	if h, ok := s.b.(provider.ConnectionHandoff); ok {
		if c := h.TakeConnection(t.LeaseID); c != nil {
			c.Close() // crabbox connects itself, from its own process
		}
	}
	return Response{Lease: wireLease(t)}
}

// capabilities are the backend's: cleanup and the checkpoint operations
// its spec declares and it implements.
func (s server) capabilities() *Capabilities {
	_, cp := s.b.(provider.NativeCheckpointBackend)
	_, fork := s.b.(provider.NativeForkBackend)
	_, restore := s.b.(provider.NativeRestoreBackend)
	return &Capabilities{
		Cleanup:    s.spec.Has(provider.FeatureCleanup),
		Checkpoint: cp && s.spec.Has(provider.FeatureCheckpoint),
		Fork:       fork && s.spec.Has(provider.FeatureFork),
		Restore:    restore && s.spec.Has(provider.FeatureRestore),
	}
}

// checkpointOp answers the checkpoint operations, refusing those the
// provider does not have.
func (s server) checkpointOp(ctx context.Context, req Request) Response {
	caps := s.capabilities()
	cannot := func(what string, f provider.Feature) Response {
		return failure(fmt.Errorf("provider %s cannot %s: it does not declare %s: %w", s.spec.Name, what, f, provider.ErrPrecondition))
	}
	if !caps.Checkpoint {
		return cannot("make native checkpoints", provider.FeatureCheckpoint)
	}
	nb := s.b.(provider.NativeCheckpointBackend)
	switch req.Operation {
	case OpCheckpointCreate:
		a, err := nb.CreateCheckpoint(ctx, provider.CheckpointRequest{
			Lease: leaseTarget(req.Lease, s.spec.Name), CheckpointID: req.Checkpoint.CheckpointID, Labels: maps.Clone(req.Checkpoint.Labels),
		})
		if err != nil {
			return failure(err)
		}
		return Response{Artifact: &a}
	case OpCheckpointList:
		all, err := nb.ListCheckpoints(ctx, provider.CheckpointListRequest{})
		if err != nil {
			return failure(err)
		}
		return Response{Artifacts: all}
	case OpCheckpointDelete:
		err := nb.DeleteCheckpoint(ctx, provider.CheckpointDeleteRequest{Artifact: *req.Artifact})
		if err != nil && !errors.Is(err, provider.ErrNotFound) {
			return failure(err)
		}
		return Response{}
	case OpFork:
		if !caps.Fork {
			return cannot("fork", provider.FeatureFork)
		}
		return s.acquired(s.b.(provider.NativeForkBackend).Fork(ctx, provider.ForkRequest{
			AcquireRequest: acquireRequest(req.Desired, req.Keep), Artifact: *req.Artifact,
		}))
	default: // OpRestore
		if !caps.Restore {
			return cannot("restore", provider.FeatureRestore)
		}
		t, err := s.b.(provider.NativeRestoreBackend).Restore(ctx, provider.RestoreRequest{
			Lease: leaseTarget(req.Lease, s.spec.Name), Artifact: *req.Artifact, PublicKey: req.PublicKey,
		})
		if err != nil {
			return failure(err)
		}
		return Response{Lease: wireLease(t)}
	}
}

func (s server) resolve(ctx context.Context, req Request) Response {
	t, err := s.b.Resolve(ctx, provider.ResolveRequest{ID: req.ID})
	if errors.Is(err, provider.ErrNotFound) {
		return Response{} // no lease: crabbox reports not found
	}
	if err != nil {
		return failure(err)
	}
	return Response{Lease: wireLease(t)}
}

func (s server) list(ctx context.Context) Response {
	ts, err := s.b.List(ctx, provider.ListRequest{})
	if err != nil {
		return failure(err)
	}
	out := make([]Lease, 0, len(ts))
	for _, t := range ts {
		out = append(out, *wireLease(t))
	}
	return Response{Leases: out}
}

func (s server) touch(ctx context.Context, req Request) Response {
	t, err := s.b.Touch(ctx, provider.TouchRequest{
		Lease: leaseTarget(req.Lease, s.spec.Name), Now: s.now(req), ExpiresAt: req.Lease.ExpiresAt,
	})
	if err != nil {
		return failure(err)
	}
	return Response{Lease: wireLease(t)}
}

func (s server) release(ctx context.Context, req Request) Response {
	err := s.b.ReleaseLease(ctx, provider.ReleaseRequest{Lease: leaseTarget(req.Lease, s.spec.Name)})
	if err != nil && !errors.Is(err, provider.ErrNotFound) {
		return failure(err)
	}
	return Response{}
}

// cleanup deletes the leases crabbox names (expired ones it holds claims
// for) through the provider's own cleanup, which checks them again, and
// answers with those it deleted.
func (s server) cleanup(ctx context.Context, req Request) Response {
	c, ok := s.b.(provider.CleanupBackend)
	if !ok {
		return failure(fmt.Errorf("provider %s has no cleanup", s.spec.Name))
	}
	named := map[string]bool{}
	for _, l := range req.Leases {
		named[l.LeaseID] = true
	}
	decisions, err := c.Cleanup(ctx, provider.CleanupRequest{
		DryRun: req.DryRun, Now: s.now(req), Claimed: func(id string) bool { return named[id] },
	})
	if err != nil {
		return failure(err)
	}
	out := []Lease{}
	for _, d := range decisions {
		if d.Deleted && named[d.LeaseID] {
			out = append(out, Lease{LeaseID: d.LeaseID, Slug: d.Slug, CloudID: d.CloudID})
		}
	}
	return Response{Leases: out}
}

// now is the time crabbox sent, or the program's own.
func (s server) now(req Request) time.Time {
	if !req.Now.IsZero() {
		return req.Now
	}
	return s.rt.Clock.Now()
}

// leaseTarget is the provider's view of a lease object crabbox sent.
func leaseTarget(l *Lease, providerName string) provider.LeaseTarget {
	t := provider.LeaseTarget{
		LeaseID: l.LeaseID, Slug: l.Slug, Provider: providerName, CloudID: l.CloudID,
		WorkRoot: l.WorkRoot, State: l.Status, Labels: maps.Clone(l.Labels),
		CreatedAt: l.CreatedAt, ExpiresAt: l.ExpiresAt,
	}
	if l.SSH != nil {
		t.Host, t.Port, t.User, t.KeyFile, t.HostKey = l.SSH.Host, l.SSH.Port, l.SSH.User, l.SSH.Key, l.SSH.HostKey
	}
	return t
}
