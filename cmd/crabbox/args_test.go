package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/crabbox-dev/crabbox/cmd/internal/cli"
	"github.com/crabbox-dev/crabbox/config"
)

// TestArrange pins how command lines are rearranged for ffcli: flags before
// or after positionals, -- and run's command.
func TestArrange(t *testing.T) {
	a := &app{stdin: strings.NewReader(""), stdout: io.Discard, stderr: io.Discard}
	p := a.program()
	paths := p.Paths()
	tests := []struct {
		args []string
		want []string
		cmd  string
		help bool
	}{
		{[]string{"status", "my-box", "--json"}, []string{"status", "--json", "--", "my-box"}, "crabbox status", false},
		{[]string{"status", "--json", "my-box"}, []string{"status", "--json", "--", "my-box"}, "crabbox status", false},
		{[]string{"status", "-json=true", "my-box"}, []string{"status", "-json=true", "--", "my-box"}, "crabbox status", false},
		{[]string{"heartbeat", "my-box", "--idle-timeout", "2h"}, []string{"heartbeat", "--idle-timeout", "2h", "--", "my-box"}, "crabbox heartbeat", false},
		{[]string{"heartbeat", "--idle-timeout=2h", "my-box", "--json"}, []string{"heartbeat", "--idle-timeout=2h", "--json", "--", "my-box"}, "crabbox heartbeat", false},
		{[]string{"providers", "describe", "ssh", "--json"}, []string{"providers", "describe", "--json", "--", "ssh"}, "crabbox providers describe", false},
		{[]string{"providers", "--json"}, []string{"providers", "--json"}, "crabbox providers", false},
		{[]string{"stop", "my-box", "--provider", "docker"}, []string{"stop", "--provider", "docker", "--", "my-box"}, "crabbox stop", false},
		{[]string{"logs", "run_0123456789ab", "-v"}, []string{"logs", "-v", "--", "run_0123456789ab"}, "crabbox logs", false},
		{[]string{"ssh", "my-box", "--print"}, []string{"ssh", "--print", "--", "my-box"}, "crabbox ssh", false},
		{[]string{"config", "show", "--json"}, []string{"config", "show", "--json"}, "crabbox config show", false},
		{[]string{"status", "--", "-odd-slug"}, []string{"status", "--", "-odd-slug"}, "crabbox status", false},
		// run: the flags end where the command begins.
		{[]string{"run", "--keep", "--", "go", "test", "-v"}, []string{"run", "--keep", "--", "go", "test", "-v"}, "crabbox run", false},
		{[]string{"run", "--keep", "go", "test", "-v", "--keep"}, []string{"run", "--keep", "--", "go", "test", "-v", "--keep"}, "crabbox run", false},
		{[]string{"run", "--", "--keep"}, []string{"run", "--", "--keep"}, "crabbox run", false},
		{[]string{"run", "--timing-json", "-", "--", "true"}, []string{"run", "--timing-json", "-", "--", "true"}, "crabbox run", false},
		{[]string{"run", "ls", "--help"}, []string{"run", "--", "ls", "--help"}, "crabbox run", false},
		// help
		{[]string{"status", "my-box", "--help"}, []string{"status", "--", "my-box"}, "crabbox status", true},
		{[]string{"-h"}, nil, "crabbox", true},
		{[]string{"config", "show", "-help"}, []string{"config", "show"}, "crabbox config show", true},
		{[]string{"help", "config", "show"}, nil, "crabbox config show", true},
		{nil, nil, "crabbox", false},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			r, err := p.Arrange(paths, tt.args)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, r.Out); diff != "" {
				t.Errorf("arguments (-want +got):\n%s", diff)
			}
			if paths[r.Cmd] != tt.cmd || r.Help != tt.help {
				t.Errorf("command %q help %v, want %q help %v", paths[r.Cmd], r.Help, tt.cmd, tt.help)
			}
		})
	}
}

// TestArrangeErrors pins the usage errors found before parsing.
func TestArrangeErrors(t *testing.T) {
	a := &app{stdin: strings.NewReader(""), stdout: io.Discard, stderr: io.Discard}
	p := a.program()
	paths := p.Paths()
	tests := []struct {
		args []string
		cmd  string
		msg  string
	}{
		{[]string{"stpo", "my-box"}, "crabbox", `unknown command "stpo"; did you mean "stop"?`},
		{[]string{"hist"}, "crabbox", `unknown command "hist"; did you mean "history"?`},
		{[]string{"frobnicate"}, "crabbox", `unknown command "frobnicate"`},
		{[]string{"config", "shwo"}, "crabbox config", `unknown command "shwo"; did you mean "show"?`},
		{[]string{"providers", "describ", "ssh"}, "crabbox providers", `unknown command "describ"; did you mean "describe"?`},
		{[]string{"status", "my-box", "--jsn"}, "crabbox status", "unknown flag --jsn; did you mean --json?"},
		{[]string{"run", "--kep", "--", "true"}, "crabbox run", "unknown flag --kep; did you mean --keep?"},
		{[]string{"logs", "--zzz"}, "crabbox logs", "unknown flag --zzz"},
		{[]string{"logs", "run_0123456789ab", "--provider", "docker"}, "crabbox logs", "unknown flag --provider"},
		{[]string{"status", "my-box", "--provider"}, "crabbox status", "flag --provider needs a value"},
		{[]string{"--json", "list"}, "crabbox", "flag --json goes after the command name: crabbox list --json ..."},
		{[]string{"--json", "providers", "describe", "ssh"}, "crabbox", "flag --json goes after the command name: crabbox providers describe --json ..."},
		// Provider flags are registered only on the command a command line
		// selects; the one it names after a misplaced flag has them too.
		{[]string{"--hetzner-location", "fsn1", "run", "true"}, "crabbox", "flag --hetzner-location goes after the command name: crabbox run --hetzner-location ..."},
		{[]string{"run", "--hetzner-lcation", "fsn1", "--", "true"}, "crabbox run", "unknown flag --hetzner-lcation; did you mean --hetzner-location?"},
		{[]string{"help", "stpo"}, "crabbox", `unknown command "stpo"; did you mean "stop"?`},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			_, err := p.Arrange(paths, tt.args)
			e, ok := err.(cli.ArgError)
			if !ok {
				t.Fatalf("error %v, want a cli.ArgError", err)
			}
			if got := paths[e.Cmd]; got != tt.cmd || e.Msg != tt.msg {
				t.Errorf("got %q: %q, want %q: %q", got, e.Msg, tt.cmd, tt.msg)
			}
		})
	}
}

// TestFlagsAfterPositionals runs commands with their flags after the
// positional arguments, as issue 16 saw them fail.
func TestFlagsAfterPositionals(t *testing.T) {
	t.Setenv("CRABBOX_STATE_DIR", t.TempDir())
	t.Setenv("CRABBOX_CONFIG", filepath.Join(t.TempDir(), "none"))
	codeA, outA, errA := inProcess(t, "providers", "describe", "ssh", "--json")
	codeB, outB, errB := inProcess(t, "providers", "describe", "--json", "ssh")
	if codeA != 0 || codeB != 0 {
		t.Fatalf("exit %d (stderr %q) and %d (stderr %q), want 0", codeA, errA, codeB, errB)
	}
	if diff := cmp.Diff(outB, outA); diff != "" {
		t.Errorf("flag after the positional (-before +after):\n%s", diff)
	}
	if code, _, stderr := inProcess(t, "status", "no-such-box", "--json"); code != exitFailure || strings.Contains(stderr, "arguments") {
		t.Errorf("status no-such-box --json: exit %d, stderr %q; want the lookup's failure, not a usage error", code, stderr)
	}
}

// normalizeHelp replaces the default config file, which depends on the
// environment, in help and usage output (and nothing else: help's
// durations are what it is about).
func normalizeHelp(s string) string {
	return strings.ReplaceAll(s, config.DefaultFile(os.Environ()), "$CONFIG_FILE")
}

// TestGoldenHelp pins every command's --help, and checks that each has an
// example and no placeholder garbled from a back-quoted word.
func TestGoldenHelp(t *testing.T) {
	a := &app{stdin: strings.NewReader(""), stdout: io.Discard, stderr: io.Discard}
	paths := a.program().Paths()
	example := regexp.MustCompile(`(?m)^  (\S+=\S+ |sudo )?crabbox\b`)
	for _, path := range paths {
		words := strings.Fields(path)[1:]
		name := "help-" + strings.Join(append([]string{"crabbox"}, words...), "-")
		t.Run(name, func(t *testing.T) {
			code, stdout, stderr := inProcess(t, append(words, "--help")...)
			if code != 0 || stderr != "" {
				t.Fatalf("%s --help: exit %d, stderr %q", path, code, stderr)
			}
			if !example.MatchString(stdout) {
				t.Errorf("%s --help has no example (an indented crabbox command line)", path)
			}
			if strings.Contains(stdout, "`") || strings.Contains(stdout, "(default 0s)") {
				t.Errorf("%s --help has a back-quote or a zero default", path)
			}
			golden(t, filepath.Join("help", name), normalizeHelp(stdout))
		})
	}
}

// TestHelpFlagsApply checks that commands that never talk to a provider
// have no provider flags, and image build only those of docker.
func TestHelpFlagsApply(t *testing.T) {
	for _, args := range [][]string{{"logs"}, {"history"}, {"version"}, {"config", "path"}, {"sync-plan"}, {"providers"}, {"agent"}} {
		_, stdout, _ := inProcess(t, append(args, "--help")...)
		if strings.Contains(stdout, "PROVIDER FLAGS") || strings.Contains(stdout, "--provider ") {
			t.Errorf("crabbox %s --help lists provider flags:\n%s", strings.Join(args, " "), stdout)
		}
	}
	_, stdout, _ := inProcess(t, "image", "build", "--help")
	for _, other := range []string{"--aws-", "--hetzner-", "--ssh-host", "--local-"} {
		if strings.Contains(stdout, other) {
			t.Errorf("image build --help lists %s flags", other)
		}
	}
	if !strings.Contains(stdout, "--docker-image") {
		t.Errorf("image build --help lacks --docker-image:\n%s", stdout)
	}
}

// TestGoldenUsageErrors pins what a typo command, an unknown flag, a
// misplaced flag and a bad value print, and that they exit 2.
func TestGoldenUsageErrors(t *testing.T) {
	t.Setenv("CRABBOX_STATE_DIR", t.TempDir())
	t.Setenv("CRABBOX_CONFIG", filepath.Join(t.TempDir(), "none"))
	for _, tt := range []struct {
		name string
		args []string
		code int
	}{
		{"error-typo-command", []string{"stpo", "my-box"}, exitUsage},
		{"error-unknown-flag", []string{"status", "my-box", "--jsn"}, exitUsage},
		{"error-misplaced-flag", []string{"--json", "list"}, exitUsage},
		{"error-bad-value", []string{"run", "--ttl", "soon", "--", "true"}, exitUsage},
		{"no-arguments", nil, 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			code, stdout, stderr := inProcess(t, tt.args...)
			if code != tt.code {
				t.Errorf("crabbox %v: exit %d, want %d", tt.args, code, tt.code)
			}
			if tt.code != 0 && (stdout != "" || strings.Count(stderr, "\n") > 2) {
				t.Errorf("crabbox %v: want only the error and a usage line on stderr; stdout %q, stderr %q", tt.args, stdout, stderr)
			}
			golden(t, tt.name, normalizeHelp(strings.TrimSpace("$ crabbox "+strings.Join(tt.args, " "))+"\n"+stdout+"--- stderr\n"+stderr))
		})
	}
}

// TestLateFlagWarnings: a word after run's command spelled as one of run's
// own flags with two dashes gets a warning naming it; single-dash words,
// flags before the command, a command after -- and words after the
// command's own -- get none.
func TestLateFlagWarnings(t *testing.T) {
	a := &app{stdin: strings.NewReader(""), stdout: io.Discard, stderr: io.Discard}
	p := a.program()
	paths := p.Paths()
	warning := func(flag string) string {
		return fmt.Sprintf("warning: %q after the command is passed to the command; put crabbox flags before it: crabbox run [flags] -- command", flag)
	}
	tests := []struct {
		args []string
		want []string
	}{
		{[]string{"run", "true", "--id", "X"}, []string{warning("--id")}},
		{[]string{"run", "true", "--id=X"}, []string{warning("--id")}},
		{[]string{"run", "--keep", "make", "test", "--provider", "docker", "--keep"}, []string{warning("--provider"), warning("--keep")}},
		// Provider options are run's flags too: the set is the flag set's.
		{[]string{"run", "true", "--ssh-host=h"}, []string{warning("--ssh-host")}},
		{[]string{"run", "go", "test", "-v", "-timeout", "5m", "./..."}, nil},
		{[]string{"run", "true", "--frobnicate"}, nil},
		{[]string{"run", "--id", "X", "true"}, nil},
		{[]string{"run", "--id", "X", "--", "true", "--id", "X"}, nil},
		{[]string{"run", "--", "true", "--keep"}, nil},
		{[]string{"run", "npm", "test", "--", "--timeout", "5000"}, nil},
		{[]string{"status", "my-box", "--json"}, nil},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			r, err := p.Arrange(paths, tt.args)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, r.Warnings); diff != "" {
				t.Errorf("warnings (-want +got):\n%s", diff)
			}
		})
	}
}

// TestLateFlagPassedWithWarning is `crabbox run echo --id X`: echo gets
// --id X, as documented, and stderr has one line saying so.
func TestLateFlagPassedWithWarning(t *testing.T) {
	t.Parallel()
	r := crabboxCmd(t, stateEnv(t), gitRepo(t), "run", "--quiet", "echo", "--id", "X")
	if r.code != 0 || r.stdout != "--id X\n" {
		t.Fatalf("exit %d, stdout %q, stderr %q; want 0 and echo's --id X", r.code, r.stdout, r.stderr)
	}
	want := `crabbox: warning: "--id" after the command is passed to the command; put crabbox flags before it: crabbox run [flags] -- command` + "\n"
	if r.stderr != want {
		t.Errorf("stderr %q, want %q", r.stderr, want)
	}
}

// BenchmarkStartVersion is the in-process part of every crabbox start:
// the command tree, the command line and the command (version). Provider
// flags are registered for the selected command only (see app.prepare).
func BenchmarkStartVersion(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		if code := Main(context.Background(), []string{"version"}, nil, io.Discard, io.Discard); code != 0 {
			b.Fatalf("version: exit %d", code)
		}
	}
}
