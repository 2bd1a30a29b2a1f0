package crabboxtest

import (
	"bytes"
	"strings"
	"testing"

	"github.com/crabbox-dev/crabbox"
	"github.com/crabbox-dev/crabbox/internal/remote"
)

// Run runs argv on box, in the box's copy of the directory that was synced
// to it through box (by Box, Start or Main: the test's working directory
// by default, WithSyncDir's directory otherwise; or by box.Sync), and
// returns what the command wrote to stdout. On a box that synced nothing
// (WithoutSync) it runs in an empty directory: the box's copy, never
// synced, of the test's working directory. It ends t with t.Fatal on a
// crabbox error and when the command exits non-zero, with the command's
// output in the message; what it wrote to stderr otherwise goes to
// t.Log. The command is stopped when t.Context() is done, so Run is for
// the test's body, not its Cleanup functions. For another directory, an
// environment or a timeout, call box.Run with a crabbox.RunRequest.
func Run(t testing.TB, box *crabbox.Lease, argv ...string) (stdout string) {
	t.Helper()
	stdout, stderr, exit := run(t, box, argv)
	if exit != 0 {
		t.Fatalf("crabboxtest: %s exited %d%s%s", quote(argv), exit, section("stdout", stdout), section("stderr", stderr))
	}
	if stderr != "" {
		t.Logf("%s:%s", quote(argv), section("stderr", stderr))
	}
	return stdout
}

// RunExitCode is Run for a command whose exit code is what the test
// checks: a non-zero exit does not fail t, and is returned. Crabbox
// errors still end t with t.Fatal.
func RunExitCode(t testing.TB, box *crabbox.Lease, argv ...string) (stdout string, exit int) {
	t.Helper()
	stdout, stderr, exit := run(t, box, argv)
	if stderr != "" {
		t.Logf("%s exited %d:%s", quote(argv), exit, section("stderr", stderr))
	}
	return stdout, exit
}

func run(t testing.TB, box *crabbox.Lease, argv []string) (stdout, stderr string, exit int) {
	t.Helper()
	if box == nil {
		t.Fatalf("crabboxtest: run %s: no box (is TestMain calling crabboxtest.Main?)", quote(argv))
	}
	var out, errOut bytes.Buffer
	req := crabbox.RunRequest{Command: argv, NoSync: true, Stdout: &out, Stderr: &errOut}
	if box.SyncedDir() == "" {
		req.Root = "." // see Run
	}
	res, err := box.Run(t.Context(), req)
	if err != nil {
		t.Fatalf("crabboxtest: run %s: %v", quote(argv), err)
	}
	return out.String(), errOut.String(), res.ExitCode
}

// quote is argv as a shell command line.
func quote(argv []string) string {
	words := make([]string, len(argv))
	for i, w := range argv {
		words[i] = remote.Quote(w)
	}
	return strings.Join(words, " ")
}

// section is a labelled block of command output for a message, or
// nothing when the output is empty.
func section(label, text string) string {
	if text == "" {
		return ""
	}
	return "\n" + label + ":\n" + strings.TrimSuffix(text, "\n")
}
