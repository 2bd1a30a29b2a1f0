package provider

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os/exec"
	"time"

	"github.com/jonboulle/clockwork"
)

// Runtime is what a backend may use to reach the outside world. Tests inject
// fakes (a fake clock, an httptest client, a scripted command runner).
type Runtime struct {
	Clock      clockwork.Clock
	HTTPClient *http.Client
	Commands   CommandRunner
	Stdout     io.Writer
	Stderr     io.Writer
	Logger     *slog.Logger
	// StateDir is a directory the provider may keep its own state in, under
	// a subdirectory named after the provider. Empty means none.
	StateDir string
}

// WithDefaults returns rt with every unset field given its real default:
// the real clock, an HTTP client with a timeout, os/exec, discarded output.
func (rt Runtime) WithDefaults() Runtime {
	if rt.Clock == nil {
		rt.Clock = clockwork.NewRealClock()
	}
	if rt.HTTPClient == nil {
		rt.HTTPClient = &http.Client{Timeout: 60 * time.Second}
	}
	if rt.Commands == nil {
		rt.Commands = ExecRunner{}
	}
	if rt.Stdout == nil {
		rt.Stdout = io.Discard
	}
	if rt.Stderr == nil {
		rt.Stderr = io.Discard
	}
	if rt.Logger == nil {
		rt.Logger = slog.New(slog.DiscardHandler)
	}
	return rt
}

// Command is a local program to run, never through a shell.
type Command struct {
	Path   string
	Args   []string
	Env    []string // nil means the current environment
	Dir    string
	Stdin  io.Reader
	Stdout io.Writer
	Stderr io.Writer
}

// CommandRunner runs local programs.
type CommandRunner interface {
	Run(ctx context.Context, cmd Command) error
}

// ExecRunner runs commands with os/exec.
type ExecRunner struct{}

// Run runs cmd and waits for it.
func (ExecRunner) Run(ctx context.Context, cmd Command) error {
	c := exec.CommandContext(ctx, cmd.Path, cmd.Args...)
	c.Env, c.Dir = cmd.Env, cmd.Dir
	c.Stdin, c.Stdout, c.Stderr = cmd.Stdin, cmd.Stdout, cmd.Stderr
	if err := c.Run(); err != nil {
		return fmt.Errorf("run %s: %w", cmd.Path, err)
	}
	return nil
}
