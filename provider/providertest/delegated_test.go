package providertest_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/crabbox-dev/crabbox/lease"
	"github.com/crabbox-dev/crabbox/provider"
	"github.com/crabbox-dev/crabbox/provider/providertest"
)

func TestSandboxConformance(t *testing.T) {
	providertest.RunDelegated(t, providertest.DelegatedHarness{
		NewBackend: func(t *testing.T) provider.DelegatedRunBackend {
			return providertest.NewSandbox("sandbox", t.TempDir())
		},
		Signals: true, ProcessTable: true,
		Reopen: func(t *testing.T, closed provider.DelegatedRunBackend) provider.DelegatedRunBackend {
			return providertest.NewSandbox("sandbox", closed.(*providertest.Sandbox).Root())
		},
	})
}

// A backend without files syncs the checkout itself; the suite runs its
// commands in that copy.
func TestRunOnlyConformance(t *testing.T) {
	providertest.RunDelegated(t, providertest.DelegatedHarness{
		NewBackend: func(t *testing.T) provider.DelegatedRunBackend {
			return providertest.RunOnly(providertest.NewSandbox("sandbox", t.TempDir()))
		},
		Signals: true, ProcessTable: true,
	})
}

func TestRunOnlyHidesFiles(t *testing.T) {
	b := providertest.RunOnly(providertest.NewSandbox("sandbox", t.TempDir()))
	if _, ok := b.(provider.DelegatedFileBackend); ok {
		t.Error("RunOnly backend still implements provider.DelegatedFileBackend")
	}
	if _, ok := b.(provider.DelegatedTouchBackend); ok {
		t.Error("RunOnly backend still implements provider.DelegatedTouchBackend")
	}
	if b.Spec().Has(provider.FeatureFiles) {
		t.Errorf("RunOnly spec declares %s", provider.FeatureFiles)
	}
}

// The faulty wrapper keeps the optional interfaces of what it wraps, and
// fires its faults at their steps.
func TestWithDelegatedFaults(t *testing.T) {
	sb := providertest.NewSandbox("sandbox", t.TempDir())
	for name, b := range map[string]provider.DelegatedRunBackend{"files and touch": sb, "run only": providertest.RunOnly(sb)} {
		f := providertest.WithDelegatedFaults(b, providertest.Fault{Step: providertest.StepStop, Times: 1})
		_, files := f.(provider.DelegatedFileBackend)
		_, touch := f.(provider.DelegatedTouchBackend)
		_, wantFiles := b.(provider.DelegatedFileBackend)
		_, wantTouch := b.(provider.DelegatedTouchBackend)
		if files != wantFiles || touch != wantTouch {
			t.Errorf("%s: wrapper has files %v, touch %v; want %v, %v", name, files, touch, wantFiles, wantTouch)
		}
		ctx := context.Background()
		if err := f.Stop(ctx, provider.StopRequest{ID: lease.NewID()}); !errors.Is(err, providertest.ErrInjected) {
			t.Errorf("%s: first Stop: %v, want the injected fault", name, err)
		}
		if err := f.Stop(ctx, provider.StopRequest{ID: lease.NewID()}); err != nil {
			t.Errorf("%s: second Stop: %v, want the fault spent", name, err)
		}
	}
}

// The suite must fail a backend that breaks the contract: here, one that
// reports every exit code as 0 and loses stderr.
func TestRunDelegatedCatchesBrokenBackend(t *testing.T) {
	rec := &recorder{TB: t}
	b := lying{providertest.NewSandbox("sandbox", t.TempDir())}
	ctx := context.Background()
	view, err := b.Warmup(ctx, provider.WarmupRequest{LeaseID: lease.NewID()})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Stop(ctx, provider.StopRequest{ID: view.ID})
	providertest.CheckRun(rec, ctx, b, provider.DelegatedRunRequest{LeaseID: view.ID, Command: []string{"sh", "-c", "echo err >&2; exit 7"}, Dir: view.WorkRoot},
		providertest.RunOutcome{ExitCode: 7, Stderr: "err\n"})
	if len(rec.errors) != 1 || !strings.Contains(rec.errors[0], "exit code 0, want 7") || !strings.Contains(rec.errors[0], `stderr ""`) {
		t.Errorf("CheckRun reported %q, want the wrong exit code and stderr", rec.errors)
	}
}

type lying struct{ *providertest.Sandbox }

func (l lying) Run(ctx context.Context, req provider.DelegatedRunRequest) (provider.DelegatedRunResult, error) {
	req.Stderr = nil
	if _, err := l.Sandbox.Run(ctx, req); err != nil {
		return provider.DelegatedRunResult{}, err
	}
	return provider.DelegatedRunResult{}, nil
}

func TestSandboxCalls(t *testing.T) {
	sb := providertest.NewSandbox("sandbox", t.TempDir())
	ctx := context.Background()
	view, err := sb.Warmup(ctx, provider.WarmupRequest{LeaseID: lease.NewID()})
	if err != nil {
		t.Fatal(err)
	}
	path := view.WorkRoot + "/a"
	if err := sb.WriteFile(ctx, provider.WriteFileRequest{LeaseID: view.ID, Path: path, Mode: 0o644, Body: strings.NewReader("abc"), Size: 3}); err != nil {
		t.Fatal(err)
	}
	if err := sb.WriteFile(ctx, provider.WriteFileRequest{LeaseID: view.ID, Path: "/etc/passwd", Mode: 0o644, Body: strings.NewReader("x"), Size: 1}); err == nil {
		t.Error("WriteFile outside the lease succeeded")
	}
	if err := sb.Stop(ctx, provider.StopRequest{ID: view.ID}); err != nil {
		t.Fatal(err)
	}
	want := []providertest.SandboxCall{
		{Op: "warmup", LeaseID: view.ID},
		{Op: "write-file", LeaseID: view.ID, Path: path, Bytes: 3},
		{Op: "write-file", LeaseID: view.ID, Path: "/etc/passwd"},
		{Op: "stop", LeaseID: view.ID},
	}
	if diff := cmp.Diff(want, sb.Calls()); diff != "" {
		t.Errorf("calls (-want +got):\n%s", diff)
	}
}
