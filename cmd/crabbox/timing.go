package main

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/crabbox-dev/crabbox"
	"github.com/crabbox-dev/crabbox/run/junit"
)

// timingReport is what --timing-json writes: stable camelCase fields,
// durations in whole milliseconds.
type timingReport struct {
	Provider    string `json:"provider"`
	LeaseID     string `json:"leaseId"`
	Slug        string `json:"slug"`
	RunID       string `json:"runId"`
	LeaseMs     int64  `json:"leaseMs"`
	ConnectMs   int64  `json:"connectMs"`
	SyncMs      int64  `json:"syncMs"`
	SyncSkipped bool   `json:"syncSkipped"`
	// The sync's phases: listing and hashing the checkout and comparing it
	// with the box's manifest, streaming the changes, and the box applying
	// them.
	SyncPlanMs     int64         `json:"syncPlanMs"`
	SyncTransferMs int64         `json:"syncTransferMs"`
	SyncApplyMs    int64         `json:"syncApplyMs"`
	SyncFiles      int           `json:"syncFiles"`
	SyncDeleted    int           `json:"syncDeleted"`
	SyncBytes      int64         `json:"syncBytes"`
	CommandMs      int64         `json:"commandMs"`
	TotalMs        int64         `json:"totalMs"`
	ExitCode       int           `json:"exitCode"`
	TimedOut       bool          `json:"timedOut"`
	TestsFailed    bool          `json:"testsFailed,omitempty"`
	Kept           bool          `json:"kept"`
	JUnit          *junit.Report `json:"junit,omitempty"`

	// Pool is set for run --pool: the pool's key and whether the box came
	// from it.
	Pool *crabbox.LeasePool `json:"pool,omitempty"`
}

func timingOf(res crabbox.RunResult) timingReport {
	t := res.Timing
	return timingReport{
		Provider: res.Provider, LeaseID: res.LeaseID, Slug: res.Slug, RunID: res.RunID,
		LeaseMs: t.Lease.Milliseconds(), ConnectMs: t.Connect.Milliseconds(),
		SyncMs: t.Sync.Milliseconds(), SyncSkipped: res.SyncSkipped,
		SyncPlanMs: res.Sync.Plan.Milliseconds(), SyncTransferMs: res.Sync.Transfer.Milliseconds(),
		SyncApplyMs: res.Sync.Apply.Milliseconds(),
		SyncFiles:   res.Sync.Sent, SyncDeleted: res.Sync.Deleted, SyncBytes: res.Sync.Bytes,
		CommandMs: t.Command.Milliseconds(), TotalMs: t.Total.Milliseconds(),
		ExitCode: res.ExitCode, TimedOut: res.TimedOut, TestsFailed: res.TestsFailed, Kept: res.Kept, JUnit: res.JUnit, Pool: res.Pool,
	}
}

// writeTiming writes the timing report to file, or to stderr for "-".
func (a *app) writeTiming(file string, res crabbox.RunResult) error {
	data, err := json.Marshal(timingOf(res))
	if err != nil {
		return err
	}
	data = append(data, '\n')
	if file == "-" {
		_, err = a.stderr.Write(data)
		return err
	}
	if err := os.WriteFile(file, data, 0o644); err != nil {
		return fmt.Errorf("write timing JSON: %w", err)
	}
	return nil
}

// summaryLine is the one line printed on stderr after a run; it names the
// run as crabbox logs, crabbox history and the coordinator's portal do:
//
//	crabbox: run run_… · lease cbx_… (tidal-lobster) 12ms · sync 30ms · command 1.2s · total 1.3s · exit 0
func summaryLine(res crabbox.RunResult) string {
	var b strings.Builder
	fmt.Fprintf(&b, "crabbox: run %s · lease %s (%s) %s · sync ", res.RunID, res.LeaseID, res.Slug, human(res.Timing.Lease))
	if res.SyncSkipped {
		b.WriteString("skipped")
	} else {
		b.WriteString(human(res.Timing.Sync))
	}
	fmt.Fprintf(&b, " · command %s · total %s · exit %d", human(res.Timing.Command), human(res.Timing.Total), res.ExitCode)
	switch {
	case res.TimedOut:
		b.WriteString(" (timed out)")
	case res.TestsFailed:
		b.WriteString(" (tests failed)")
	}
	if res.Kept {
		fmt.Fprintf(&b, " · kept %s (crabbox ssh %s; crabbox stop %s)", res.LeaseID, res.Slug, res.Slug)
	}
	return b.String()
}

// human shows a duration as 12ms below a second, 1.2s above.
func human(d time.Duration) string {
	if d < time.Second {
		return fmt.Sprintf("%dms", d.Milliseconds())
	}
	return fmt.Sprintf("%.1fs", d.Seconds())
}
