package crabbox_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"

	"github.com/crabbox-dev/crabbox"
	"github.com/crabbox-dev/crabbox/provider"
	"github.com/crabbox-dev/crabbox/run"
)

// RunRequest.Stdin reaches the command, one-shot and on a held lease, on
// the local provider; without it the command's stdin is empty.
func TestRunStdin(t *testing.T) {
	c := newClient(t, t.TempDir())
	repo := gitRepo(t)
	ctx := context.Background()
	wcl := func(res crabbox.RunResult, err error, out *bytes.Buffer, want string) {
		t.Helper()
		if err != nil || res.ExitCode != 0 || strings.TrimSpace(out.String()) != want {
			t.Errorf("Run = exit %d, %v, stdout %q; want exit 0 and %q", res.ExitCode, err, out.String(), want)
		}
	}
	var out bytes.Buffer
	res, err := c.Run(ctx, crabbox.RunRequest{Root: repo, Command: []string{"wc", "-l"}, Stdin: strings.NewReader("a\nb\n"), Stdout: &out})
	wcl(res, err, &out, "2")

	box, err := c.Acquire(ctx, crabbox.AcquireOptions{Keep: true})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Stop(ctx, box.ID())
	defer box.Close()
	out.Reset()
	res, err = box.Run(ctx, crabbox.RunRequest{Root: repo, Command: []string{"cat"}, Stdin: strings.NewReader("hello\n"), Stdout: &out})
	wcl(res, err, &out, "hello")
	out.Reset()
	res, err = c.Run(ctx, crabbox.RunRequest{Lease: box.ID(), Root: repo, Shell: "wc -c", Stdout: &out})
	wcl(res, err, &out, "0")

	out.Reset()
	got, err := box.Exec(ctx, run.Command{Shell: "read -r l; echo got $l", Stdin: strings.NewReader("x\ny\n"), Stdout: &out})
	if err != nil || got.ExitCode != 0 || out.String() != "got x\n" {
		t.Errorf("Exec = %+v, %v, stdout %q; want exit 0 and %q", got, err, out.String(), "got x\n")
	}
}

// A delegated provider that cannot forward stdin refuses a run with it,
// before anything is acquired, naming itself and what to do.
func TestDelegatedRunRefusesStdin(t *testing.T) {
	f := &fakeDelegated{}
	c := delegatedClient(t, f)
	_, err := c.Run(context.Background(), crabbox.RunRequest{Root: gitRepo(t), Command: []string{"cat"}, Stdin: strings.NewReader("x")})
	if !errors.Is(err, provider.ErrPrecondition) {
		t.Fatalf("Run error = %v, want a precondition error", err)
	}
	for _, want := range []string{`provider "sandbox" cannot forward stdin`, "--no-stdin (-n)", "RunRequest.Stdin nil"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	if len(f.calls) != 0 {
		t.Errorf("the provider was called: %q", f.calls)
	}
	if cl := claims(t, c); len(cl) != 0 {
		t.Errorf("claims made: %+v", cl)
	}

	// On a held lease: Exec refuses too, without running anything.
	box, err := c.Acquire(context.Background(), crabbox.AcquireOptions{Keep: true})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Stop(context.Background(), box.ID())
	defer box.Close()
	if _, err := box.Exec(context.Background(), run.Command{Command: []string{"cat"}, Stdin: strings.NewReader("x")}); !errors.Is(err, provider.ErrPrecondition) {
		t.Errorf("Exec error = %v, want a precondition error", err)
	}
	if _, err := box.Run(context.Background(), crabbox.RunRequest{Root: gitRepo(t), Command: []string{"cat"}, Stdin: strings.NewReader("x")}); !errors.Is(err, provider.ErrPrecondition) {
		t.Errorf("Lease.Run error = %v, want a precondition error", err)
	}
	for _, call := range f.calls {
		if strings.HasPrefix(call, "run") {
			t.Errorf("the provider ran %q", call)
		}
	}
}

// A delegated provider with FeatureStdin gets the run's stdin.
func TestDelegatedRunForwardsStdin(t *testing.T) {
	f := &fakeDelegated{stdin: true}
	c := delegatedClient(t, f)
	var out bytes.Buffer
	res, err := c.Run(context.Background(), crabbox.RunRequest{Root: gitRepo(t), Command: []string{"cat"}, Stdin: strings.NewReader("piped\n"), Stdout: &out})
	if err != nil || res.ExitCode != 0 || out.String() != "piped\nout\n" {
		t.Errorf("Run = exit %d, %v, stdout %q; want the stdin echoed", res.ExitCode, err, out.String())
	}
}

// Forwarding stdin costs one more session; a command without stdin opens
// no more than before.
func TestStdinSessionCost(t *testing.T) {
	counter := &sessionCounter{}
	c := newClient(t, t.TempDir(), crabbox.WithLogger(slog.New(counter)))
	ctx := context.Background()
	box, err := c.Acquire(ctx, crabbox.AcquireOptions{Keep: true})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Stop(ctx, box.ID())
	defer box.Close()
	if _, err := box.Exec(ctx, run.Command{Command: []string{"true"}}); err != nil {
		t.Fatal(err)
	}
	counter.take()
	if _, err := box.Exec(ctx, run.Command{Command: []string{"true"}}); err != nil {
		t.Fatal(err)
	}
	if got := counter.take(); got != 1 {
		t.Errorf("a command without stdin started %d sessions, want 1", got)
	}
	if _, err := box.Exec(ctx, run.Command{Command: []string{"cat"}, Stdin: strings.NewReader("x")}); err != nil {
		t.Fatal(err)
	}
	if got := counter.take(); got != 2 {
		t.Errorf("a command with stdin started %d sessions, want 2 (the command's and its input's)", got)
	}
}
