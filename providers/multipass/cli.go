package multipass

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/crabbox-dev/crabbox/provider"
)

// Exit codes of the multipass CLI (include/multipass/cli/return_codes.h
// and include/multipass/constants.h in canonical/multipass).
const (
	exitCommandLineError = 1 // the arguments were refused
	exitCommandFail      = 2 // the daemon refused or failed the command
	exitDaemonFail       = 3 // the daemon is unavailable
	exitTimeout          = 5 // --timeout passed
)

// cli runs the multipass command-line client through a command runner
// and reads its documented JSON output (--format json). It never goes
// through a shell, and nothing secret is ever an argument: the user data
// goes to `launch --cloud-init -` on stdin.
type cli struct {
	path string
	run  provider.CommandRunner
}

// CLIError is a multipass command that failed: the exit code and the
// message it printed ("info failed: instance \"x\" does not exist").
type CLIError struct {
	// Command is the multipass subcommand ("launch", "info").
	Command string
	// Code is the exit code, -1 when the command did not exit (it could
	// not start, or it was stopped).
	Code int
	// Message is the end of what the command printed to stderr.
	Message string
	// Err is the runner's error.
	Err error
}

func (e *CLIError) Error() string {
	if e.Message == "" {
		return fmt.Sprintf("multipass %s: %v", e.Command, e.Err)
	}
	return fmt.Sprintf("multipass %s: %s (%v)", e.Command, e.Message, e.Err)
}

func (e *CLIError) Unwrap() error { return e.Err }

// maxMessage bounds the stderr an error quotes.
const maxMessage = 2000

// exec runs `multipass args...` with stdin, returning its standard output.
// A failure is a *CLIError wrapping the portable kind of package provider
// that its exit code and message say.
func (c cli) exec(ctx context.Context, stdin io.Reader, args ...string) ([]byte, error) {
	var stdout, stderr bytes.Buffer
	err := c.run.Run(ctx, provider.Command{Path: c.path, Args: args, Stdin: stdin, Stdout: &stdout, Stderr: &stderr})
	if err == nil {
		return stdout.Bytes(), nil
	}
	msg := strings.TrimSpace(stderr.String())
	if len(msg) > maxMessage {
		msg = "..." + msg[len(msg)-maxMessage:]
	}
	code := -1
	var coded interface{ ExitCode() int }
	if errors.As(err, &coded) {
		code = coded.ExitCode()
	}
	cerr := &CLIError{Command: args[0], Code: code, Message: msg, Err: err}
	if ctx.Err() != nil {
		return nil, fmt.Errorf("%w: %w", cerr, context.Cause(ctx))
	}
	return nil, fmt.Errorf("%w: %w", cerr, kind(code, msg, err))
}

// kind is the portable error kind of a failed command.
func kind(code int, msg string, err error) error {
	lower := strings.ToLower(msg)
	switch {
	case errors.Is(err, exec.ErrNotFound):
		return provider.ErrPrecondition
	case strings.Contains(lower, "does not exist"):
		return provider.ErrNotFound
	case strings.Contains(lower, "already exists"), strings.Contains(lower, "cannot shut down"):
		// "Cannot shut down instance NAME while starting." (suspending):
		// the instance is busy (base_virtual_machine.cpp).
		return provider.ErrConflict
	case code == exitTimeout, strings.Contains(lower, "timed out"):
		return provider.ErrTransient
	case code == exitDaemonFail:
		return provider.ErrPrecondition
	case code == exitCommandLineError, strings.Contains(lower, "invalid"), strings.Contains(lower, "unable to find an image"),
		strings.Contains(lower, "could not load cloud-init"):
		return provider.ErrPrecondition
	case strings.Contains(lower, "not enough") || strings.Contains(lower, "insufficient"):
		return provider.ErrCapacity
	}
	return provider.ErrTransient
}

// launchSpec is one `multipass launch`.
type launchSpec struct {
	Name, Image    string
	CPUs           int
	Memory, Disk   string
	Timeout        time.Duration
	CloudInitStdin string
}

// launch launches an instance and waits, as multipass does, until it has
// booted and cloud-init has finished (or the timeout passed).
func (c cli) launch(ctx context.Context, s launchSpec) error {
	args := []string{"launch", "--name", s.Name, "--cpus", strconv.Itoa(s.CPUs), "--memory", s.Memory, "--disk", s.Disk,
		"--timeout", strconv.Itoa(int(max(s.Timeout/time.Second, 1))), "--cloud-init", "-", s.Image}
	_, err := c.exec(ctx, strings.NewReader(s.CloudInitStdin), args...)
	return err
}

// instance is an instance as `multipass list --format json` and
// `multipass info --format json` show it (json_formatter.cpp).
type instance struct {
	Name  string   `json:"name"`
	State string   `json:"state"`
	IPv4  []string `json:"ipv4"`
}

// Instance states (format_utils.cpp, status_string_for).
const (
	stateRunning = "Running"
	stateDeleted = "Deleted"
)

// info reads one instance with `multipass info --format json NAME`.
func (c cli) info(ctx context.Context, name string) (instance, error) {
	out, err := c.exec(ctx, nil, "info", "--format", "json", name)
	if err != nil {
		return instance{}, err
	}
	var reply struct {
		Errors []json.RawMessage    `json:"errors"`
		Info   map[string]*instance `json:"info"`
	}
	if err := json.Unmarshal(out, &reply); err != nil {
		return instance{}, fmt.Errorf("multipass info %s: unreadable output: %w", name, err)
	}
	in := reply.Info[name]
	if in == nil {
		return instance{}, fmt.Errorf("multipass info %s: the output has no instance %q: %w", name, name, provider.ErrNotFound)
	}
	in.Name = name
	return *in, nil
}

// list lists every instance with `multipass list --format json`.
func (c cli) list(ctx context.Context) ([]instance, error) {
	out, err := c.exec(ctx, nil, "list", "--format", "json")
	if err != nil {
		return nil, err
	}
	var reply struct {
		List *[]instance `json:"list"`
	}
	if err := json.Unmarshal(out, &reply); err != nil {
		return nil, fmt.Errorf("multipass list: unreadable output: %w", err)
	}
	if reply.List == nil {
		return nil, errors.New("multipass list: the output has no list")
	}
	return *reply.List, nil
}

// delete deletes and purges an instance.
func (c cli) delete(ctx context.Context, name string) error {
	_, err := c.exec(ctx, nil, "delete", "--purge", name)
	return err
}

// version is `multipass version --format json`: the client's version and,
// when the daemon answers, the daemon's.
type version struct {
	Client string `json:"multipass"`
	Daemon string `json:"multipassd"`
}

func (c cli) version(ctx context.Context) (version, error) {
	out, err := c.exec(ctx, nil, "version", "--format", "json")
	if err != nil {
		return version{}, err
	}
	var v version
	if err := json.Unmarshal(out, &v); err != nil {
		return version{}, fmt.Errorf("multipass version: unreadable output: %w", err)
	}
	return v, nil
}
