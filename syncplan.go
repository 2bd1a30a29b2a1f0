package crabbox

import (
	"context"
	"fmt"

	"github.com/crabbox-dev/crabbox/lease"
	"github.com/crabbox-dev/crabbox/sync"
)

// Errors of the directory a run or a sync plan starts from, for errors.Is.
// A directory that does not exist is an error for which
// errors.Is(err, fs.ErrNotExist) holds.
var (
	// ErrNotCheckout: the directory is not inside a git checkout, and
	// syncing it as a plain directory was not asked for (see
	// RunRequest.PlainDir).
	ErrNotCheckout = sync.ErrNotCheckout
	// ErrUnsafeSyncDir: the directory to sync is one that never leaves
	// this machine: a home directory or a directory holding one (a file
	// system root among them), or crabbox's state directory (which holds
	// the leases' private keys) or a directory holding it.
	ErrUnsafeSyncDir = sync.ErrUnsafeDir
)

// SyncPlan is what a run from dir would sync (the whole checkout holding
// dir), computed without a box, with the guardrails' verdict.
type SyncPlan struct {
	sync.Plan
	// Warning is set when the plan is past a warning limit.
	Warning string `json:"warning,omitempty"`
	// Error is set when the plan is past a hard limit: a run would refuse
	// to sync it without --force-sync-large.
	Error string `json:"error,omitempty"`
}

// SyncPlanRequest says what PlanSync plans.
type SyncPlanRequest struct {
	// Dir and PlainDir are a run's RunRequest.Root and PlainDir: the plan
	// is what that run would sync, and PlanSync refuses what the run
	// would refuse (ErrNotCheckout, ErrUnsafeSyncDir).
	Dir      string
	PlainDir bool
	// Exclude holds gitignore-style patterns left out of the sync, on top
	// of the built-in excludes and the checkout's .crabboxignore.
	Exclude []string
	// SkipSubmodules plans a sync that leaves git submodules out, as
	// SyncOptions.SkipSubmodules does. A plan never refuses symlinks
	// leading outside the checkout.
	SkipSubmodules bool
	// StateDir is the crabbox state directory, which is never synced
	// (default: lease.DefaultDir()).
	StateDir string
}

// PlanSync computes the sync plan for a run from req.Dir ("" means the
// current directory) under the default limits.
func PlanSync(ctx context.Context, req SyncPlanRequest) (SyncPlan, error) {
	state := req.StateDir
	if state == "" {
		state, _ = lease.DefaultDir() // none: there is no state directory to keep out
	}
	co, err := sync.FindSyncRoot(ctx, req.Dir, req.PlainDir, state)
	if err != nil {
		return SyncPlan{}, fmt.Errorf("plan sync: %w", err)
	}
	p, err := sync.MakePlanWith(ctx, co.Root, sync.FileSetOptions{Exclude: req.Exclude, SkipSubmodules: req.SkipSubmodules})
	if err != nil {
		return SyncPlan{}, err
	}
	out := SyncPlan{Plan: p}
	warning, err := p.Check(sync.DefaultLimits())
	out.Warning = warning
	if err != nil {
		out.Error = err.Error()
	}
	return out, nil
}
