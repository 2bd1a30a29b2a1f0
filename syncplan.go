package crabbox

import (
	"context"

	"github.com/crabbox-dev/crabbox/sync"
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

// PlanSync computes the sync plan for dir ("" means the current directory)
// under the default limits, leaving out what exclude (gitignore-style
// patterns), the built-in excludes and .crabboxignore leave out.
func PlanSync(ctx context.Context, dir string, exclude []string) (SyncPlan, error) {
	root, _, err := checkout(ctx, dir)
	if err != nil {
		return SyncPlan{}, err
	}
	p, err := sync.MakePlanWith(ctx, root, sync.FileSetOptions{Exclude: exclude})
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
