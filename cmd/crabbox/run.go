package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/peterbourgon/ff/v3/ffcli"
	"golang.org/x/term"

	"github.com/crabbox-dev/crabbox"
	"github.com/crabbox-dev/crabbox/run"
)

// stringList is a repeatable string flag.
type stringList []string

func (l *stringList) String() string     { return "" }
func (l *stringList) Set(v string) error { *l = append(*l, v); return nil }

// runFlags are run's own flags.
type runFlags struct {
	id, from, pool, shell, script, timingJSON string
	junit                                     string
	syncDir                                   string
	keep, keepOnFailure, noSync, syncOnly     bool
	desktop                                   bool
	failOnTestFailures, quiet                 bool
	noStdin                                   bool
	checksum, fullResync, forceSyncLarge      bool
	refuseOutsideLinks, skipSubmodules        bool
	ttl, idle, timeout                        time.Duration
	env, syncExclude                          stringList
	artifacts, downloads                      stringList
	artifactsDir                              string
	artifactsMaxSize                          byteSize
	artifactsOverwrite, captureOnFail         bool
	artifactsStrict                           bool
	captureStdout, captureStderr              string
}

func (a *app) runCmd() *ffcli.Command {
	fs, lf := a.newFlagSet("run")
	var f runFlags
	fs.StringVar(&f.id, "id", "", "reuse the warm lease with this ID or slug instead of acquiring one")
	fs.StringVar(&f.from, "from", "", "start the new lease from this checkpoint (ID or name; see crabbox checkpoint)")
	fs.StringVar(&f.pool, "pool", "", "take the new lease's box from this ready pool (see crabbox pool), and refill it in the background")
	fs.BoolVar(&f.desktop, "desktop", false, "give a newly acquired box a desktop (a display and a VNC server; see crabbox vnc, crabbox screenshot)")
	fs.BoolVar(&f.keep, "keep", false, "keep a newly acquired lease after the run (stop it with crabbox stop)")
	fs.BoolVar(&f.keepOnFailure, "keep-on-failure", false, "keep a newly acquired lease when the command exits non-zero")
	fs.BoolVar(&f.noSync, "no-sync", false, "do not copy the checkout; run in the existing workdir")
	fs.StringVar(&f.syncDir, "sync-dir", "", "sync this directory, even one outside any git checkout, and run in it (never a home directory or crabbox's state directory)")
	fs.BoolVar(&f.syncOnly, "sync-only", false, "copy the checkout and run nothing")
	fs.BoolVar(&f.checksum, "checksum", false, "verify file contents on the box instead of trusting what crabbox synced last")
	fs.BoolVar(&f.fullResync, "full-resync", false, "delete what crabbox synced to the box before and copy everything again")
	fs.Var(&f.syncExclude, "sync-exclude", "leave files matching the gitignore-style `PATTERN` out of the sync (repeatable; also .crabboxignore)")
	fs.BoolVar(&f.refuseOutsideLinks, "refuse-outside-links", false, "fail the sync on a symlink pointing outside the checkout instead of syncing it as a link with a warning")
	fs.BoolVar(&f.skipSubmodules, "skip-submodules", false, "leave git submodules out of the sync (by default their tracked files are synced)")
	fs.BoolVar(&f.forceSyncLarge, "force-sync-large", false, "sync even past 150,000 files or 20 GiB (see crabbox sync-plan)")
	fs.StringVar(&f.shell, "shell", "", "run this shell command line (sh -c) instead of a command after --")
	fs.StringVar(&f.script, "script", "", "run this local script file with sh on the box; arguments after -- are its $1, $2, ...")
	fs.DurationVar(&f.timeout, "timeout", 0, "stop the command after this long and exit 124 (0: no limit)")
	fs.DurationVar(&f.ttl, "ttl", 0, "maximum lifetime of a new lease (default 90m)")
	fs.DurationVar(&f.idle, "idle-timeout", 0, "a new lease expires after this long without use (default 30m)")
	fs.StringVar(&f.timingJSON, "timing-json", "", "write the run's timings as JSON to this file (- for stderr)")
	fs.StringVar(&f.junit, "junit", "", "after the run, count the JUnit XML files matching this glob (relative to the workdir on the box)")
	fs.BoolVar(&f.failOnTestFailures, "fail-on-test-failures", false, "exit 1 when JUnit reports failures or errors and the command exited 0")
	fs.BoolVar(&f.quiet, "quiet", false, "do not print the summary line after the run")
	fs.Var(&f.artifacts, "artifacts", "after the command (also a failed or timed-out one) bring the files matching `GLOB` home (repeatable; relative to the workdir on the box; ** for any directories)")
	fs.StringVar(&f.artifactsDir, "artifacts-dir", "", "copy artifacts into this `DIR` (default: the run's directory in the state directory, <state>/artifacts/RUN_ID)")
	f.artifactsMaxSize = run.DefaultMaxFetchBytes
	fs.Var(&f.artifactsMaxSize, "artifacts-max-size", "bring nothing home when artifacts and downloads together exceed this `SIZE` (such as 500MiB or 2GiB)")
	fs.BoolVar(&f.artifactsOverwrite, "artifacts-overwrite", false, "let artifacts, downloads and captures replace existing local files")
	fs.BoolVar(&f.artifactsStrict, "artifacts-strict", false, "exit 125 when the command exited 0 but an artifact or download stayed on the box (by default a warning names it)")
	fs.Var(&f.downloads, "download", "after the command bring one file home: `REMOTE[=LOCAL]`, REMOTE relative to the workdir on the box, LOCAL where you say (relative to the current directory, or absolute; default: REMOTE's base name; repeatable)")
	fs.StringVar(&f.captureStdout, "capture-stdout", "", "also write the command's stdout to this local `FILE` (its directory is created)")
	fs.StringVar(&f.captureStderr, "capture-stderr", "", "also write the command's stderr to this local `FILE` (its directory is created)")
	fs.BoolVar(&f.captureOnFail, "capture-on-fail", false, "keep the --capture-stdout/--capture-stderr files only when the run fails")
	fs.Var(&f.env, "env", "forward the environment variable `NAME` to the box (repeatable; CI is always forwarded)")
	fs.BoolVar(&f.noStdin, "no-stdin", false, "do not forward stdin to the command (its stdin is empty, /dev/null)")
	fs.BoolVar(&f.noStdin, "n", false, "short for --no-stdin, as ssh -n")
	return &ffcli.Command{
		Name:       "run",
		ShortUsage: "crabbox run [flags] -- command [args...] | --shell 'cmd' | --script FILE [-- args...] | --sync-only",
		ShortHelp:  "run a command on a box with your checkout synced to it",
		LongHelp: `Acquire a box (or reuse one with --id, or start one from a checkpoint with
--from), copy the git checkout holding the
current directory to it, run the command there and release the box (unless
--keep, --keep-on-failure after a failure, or --id). Outside a git checkout
run refuses and uploads nothing: name a plain directory to sync on purpose
with --sync-dir DIR, or sync nothing with --no-sync. A home directory and
crabbox's state directory are never synced.

The exit status is the command's own, even when the box could not be
released afterwards (a line on stderr says so, and crabbox cleanup retries);
124 when --timeout stopped it; 125 means crabbox failed; 2 a usage error,
including a run refused for the directory it would sync. A summary line
(run, lease, sync, command, total, exit) follows on stderr unless --quiet. Runs
are recorded in the local history (crabbox history, crabbox logs RUN_ID); with
a coordinator the run ID is the coordinator's, so crabbox logs RUN_ID and its
portal find the run from any machine.

Artifacts and downloads come home after the command, also a failed one. A
file that cannot come home safely (a name with a line break, a symlink out of
the workdir, a symlink to a directory under a glob, a missing download) stays
on the box with a warning line naming it, and the rest still comes home;
--artifacts-strict makes such a run exit 125 when the command exited 0.

crabbox's flags end where the command begins: everything after -- (or after
the first word that is not a flag) is the command, flags included. A word
after the command spelled as one of run's own --flags still goes to the
command, with a warning on stderr: crabbox run true --id X leases a new box.

stdin is forwarded to the command, as ssh does, when it is a pipe or a file
(crabbox run -- psql < dump.sql, ... | crabbox run -- wc -l): the command sees
end of file where the input ends. From a terminal or /dev/null it is not, and
the command's stdin is empty; --no-stdin (-n) never forwards it. A delegated
provider that cannot forward stdin refuses a run with it: pass -n there.

With --pool KEY the box comes from a ready pool (crabbox pool ensure made it)
at once, and the pool is refilled in the background; when the pool has no box
ready, one is acquired the ordinary way with the pool's provider, and a line
on stderr says so (--timing-json: "pool": {"key": ..., "hit": false}).

  crabbox run -- go test ./...
  crabbox run --keep --provider docker -- make test
  crabbox run --from go-warm -- go test ./...
  crabbox run --pool docker -- make test`,
		FlagSet: fs,
		Exec: a.layered(fs, lf, func(ctx context.Context, args []string) error {
			req, err := f.request(args)
			if err != nil {
				return err
			}
			req.Env = run.AllowEnv(os.Environ(), append([]string{"CI"}, f.env...))
			if !f.noStdin {
				req.Stdin = forwardedStdin(a.stdin)
			}
			status := &statusLine{w: a.stderr}
			req.Stdout, req.Stderr = status.before(a.stdout), status.before(a.stderr)
			req.SyncProgress = status.syncProgress()
			req.SyncWarn = func(w string) { fmt.Fprintf(req.Stderr, "crabbox: %s\n", w) }
			req.Acquire.Warn = req.SyncWarn
			return a.withClient(lf, f.keep || f.keepOnFailure, func(c *crabbox.Client) error {
				res, err := c.Run(ctx, req)
				status.clear()
				if res.Pool != nil {
					a.tookFromPool(lf, c, f.pool, res.Pool)
				}
				if errors.Is(err, run.ErrFetchTooLarge) {
					return fmt.Errorf("%w; raise --artifacts-max-size or match fewer files", err)
				}
				if errors.Is(err, run.ErrFileExists) {
					return fmt.Errorf("%w; --artifacts-overwrite replaces it", err)
				}
				if errors.Is(err, run.ErrIncomplete) {
					// What came home, and each file that did not, before
					// the error (--artifacts-strict).
					a.printArtifacts(res, f.quiet)
					return fmt.Errorf("%s (--artifacts-strict)", oneLine(err))
				}
				if err != nil {
					// Main turns an interrupted run into exit 128+signal.
					return syncDirError(err, "to sync a directory outside git on purpose name it with --sync-dir DIR, or sync nothing with --no-sync")
				}
				return a.report(f, res)
			})
		}),
	}
}

// request turns the flags and arguments into a library request.
func (f *runFlags) request(args []string) (crabbox.RunRequest, error) {
	req := crabbox.RunRequest{
		Lease: f.id, From: f.from,
		Acquire: crabbox.AcquireOptions{TTL: f.ttl, IdleTimeout: f.idle, Keep: f.keep, Pool: f.pool, Desktop: f.desktop},
		Command: args, Shell: f.shell, NoSync: f.noSync, SyncOnly: f.syncOnly,
		Root: f.syncDir, PlainDir: f.syncDir != "",
		Keep: f.keep, KeepOnFailure: f.keepOnFailure, Timeout: f.timeout,
		JUnit: f.junit, FailOnTestFailures: f.failOnTestFailures, RecordHistory: true,
		Checksum: f.checksum, FullResync: f.fullResync, ForceSyncLarge: f.forceSyncLarge, SyncExclude: f.syncExclude,
		RefuseOutsideLinks: f.refuseOutsideLinks, SkipSubmodules: f.skipSubmodules,
		Artifacts: f.artifacts, ArtifactsDir: f.artifactsDir, ArtifactsMaxBytes: int64(f.artifactsMaxSize),
		ArtifactsOverwrite: f.artifactsOverwrite, ArtifactsStrict: f.artifactsStrict, CaptureStdout: f.captureStdout, CaptureStderr: f.captureStderr,
		CaptureOnFail: f.captureOnFail,
	}
	for _, d := range f.downloads {
		remote, local, _ := strings.Cut(d, "=")
		req.Downloads = append(req.Downloads, run.Download{Remote: remote, Local: local})
	}
	if f.script != "" {
		// After --, a script's arguments ($1, $2, ...), not a command.
		req.Command, req.ScriptArgs = nil, args
	}
	given := 0
	for _, set := range []bool{len(req.Command) > 0, f.shell != "", f.script != ""} {
		if set {
			given++
		}
	}
	switch {
	case f.id != "" && f.from != "":
		return req, usagef("run: --id reuses a lease and --from starts a new one from a checkpoint: give one")
	case f.pool != "" && (f.id != "" || f.from != ""):
		return req, usagef("run: --pool takes a new lease's box from a ready pool; --id and --from do not go with it")
	case f.syncOnly && given > 0:
		return req, usagef("run: --sync-only takes no command")
	case f.syncOnly && f.noSync:
		return req, usagef("run: --sync-only and --no-sync contradict each other")
	case f.syncDir != "" && f.noSync:
		return req, usagef("run: --sync-dir and --no-sync contradict each other")
	case !f.syncOnly && given == 0:
		return req, usagef("run: no command given (crabbox run -- command [args...], --shell, --script or --sync-only)")
	case given > 1:
		return req, usagef("run: give one of a command after --, --shell and --script")
	case f.timeout < 0:
		return req, usagef("run: --timeout must not be negative")
	case f.failOnTestFailures && f.junit == "":
		return req, usagef("run: --fail-on-test-failures needs --junit")
	case f.captureOnFail && f.captureStdout == "" && f.captureStderr == "":
		return req, usagef("run: --capture-on-fail needs --capture-stdout or --capture-stderr")
	}
	globs := append(slices.Clone(req.Artifacts), strings.Fields(f.junit)...) // JUnit files come home too
	if err := (run.Fetch{Globs: globs, Downloads: req.Downloads}).Check(); err != nil {
		return req, usagef("run: %s", oneLine(err))
	}
	if f.script != "" {
		body, err := os.ReadFile(f.script)
		if err != nil {
			return req, fmt.Errorf("run: read script: %w", err)
		}
		if len(body) == 0 {
			return req, fmt.Errorf("run: script %s is empty", f.script)
		}
		req.Script, req.ScriptName = string(body), filepath.Base(f.script)
	}
	return req, nil
}

// report prints what follows a run and turns its outcome into the exit
// status.
func (a *app) report(f runFlags, res crabbox.RunResult) error {
	if res.JUnit != nil {
		a.printJUnit(*res.JUnit, f.quiet)
	}
	a.printArtifacts(res, f.quiet)
	if res.CoordinatorErr != nil {
		fmt.Fprintf(a.stderr, "crabbox: warning: %s; %s is a local run ID: crabbox logs %s works on this machine only\n",
			oneLine(res.CoordinatorErr), res.RunID, res.RunID)
	}
	if !f.quiet {
		fmt.Fprintln(a.stderr, summaryLine(res))
	}
	if res.ReleaseErr != nil {
		// The command's exit code still wins: the lease is left claimed
		// (marked failed), and cleanup releases it.
		fmt.Fprintf(a.stderr, "crabbox: %s; the lease stays claimed: crabbox cleanup (or crabbox stop %s) will release it\n", oneLine(res.ReleaseErr), res.LeaseID)
	}
	if f.timingJSON != "" {
		if err := a.writeTiming(f.timingJSON, res); err != nil {
			return err
		}
	}
	// The library settles the run's one exit code (--fail-on-test-failures
	// included); the summary, the timing JSON and history show the same.
	if res.ExitCode != 0 {
		return exitError{res.ExitCode}
	}
	return nil
}

var _ flag.Value = (*stringList)(nil)

// forwardedStdin is what run forwards to the command from the CLI's stdin:
// a pipe, a socket or a regular file, as ssh would; not a terminal or
// another device (/dev/null), nor a directory. A reader that is no file
// (Main called with one) is forwarded.
func forwardedStdin(in io.Reader) io.Reader {
	f, ok := in.(*os.File)
	if !ok {
		return in
	}
	if f == nil || term.IsTerminal(int(f.Fd())) {
		return nil
	}
	fi, err := f.Stat()
	if err != nil {
		return nil // closed, or not there at all
	}
	switch mode := fi.Mode(); {
	case mode.IsRegular(), mode&(os.ModeNamedPipe|os.ModeSocket) != 0:
		return f
	default:
		return nil
	}
}

// syncDirError makes a run or sync plan refused for the directory it would
// sync a usage error (exit 2); outside a checkout, hint says what to do.
func syncDirError(err error, hint string) error {
	switch {
	case errors.Is(err, crabbox.ErrNotCheckout):
		return usagef("%s; %s", oneLine(err), hint)
	case errors.Is(err, crabbox.ErrUnsafeSyncDir):
		return usagef("%s", oneLine(err))
	}
	return err
}

// printArtifacts reports what the run brought home on stderr: globs that
// matched nothing and files that stayed on the box, one line each
// (always), the artifacts directory and each download (unless quiet).
func (a *app) printArtifacts(res crabbox.RunResult, quiet bool) {
	for _, g := range res.ArtifactsUnmatched {
		fmt.Fprintf(a.stderr, "crabbox: artifacts: nothing matched %s\n", run.Quote(g))
	}
	for _, s := range res.ArtifactsSkipped {
		fmt.Fprintf(a.stderr, "crabbox: warning: %s stayed on the box: %s\n", strconv.Quote(s.Path), oneLine(errors.New(s.Reason)))
	}
	if quiet {
		return
	}
	n, size := 0, int64(0)
	for _, art := range res.Artifacts {
		switch art.Kind {
		case run.KindArtifact:
			n, size = n+1, size+art.Size
		case run.KindDownload:
			fmt.Fprintf(a.stderr, "crabbox: downloaded %s to %s (%s)\n", art.Remote, art.Local, run.FormatBytes(art.Size))
		}
	}
	if res.ArtifactsDir != "" {
		fmt.Fprintf(a.stderr, "crabbox: artifacts: %d files (%s) in %s\n", n, run.FormatBytes(size), res.ArtifactsDir)
	}
}

// byteSize is a size flag: bytes, or a number with a unit (KiB, MiB,
// GiB, TiB, or K, M, G, T, KB, MB, GB, TB, all powers of 1024).
type byteSize int64

func (b *byteSize) String() string { return run.FormatBytes(int64(*b)) }

func (b *byteSize) Set(v string) error {
	s := strings.TrimSpace(v)
	num := strings.TrimRight(s, "KMGTiBkmgtb ")
	unit := strings.ToUpper(strings.TrimSpace(s[len(num):]))
	shift, ok := map[string]uint{"": 0, "B": 0, "K": 10, "KB": 10, "KIB": 10, "M": 20, "MB": 20, "MIB": 20,
		"G": 30, "GB": 30, "GIB": 30, "T": 40, "TB": 40, "TIB": 40}[unit]
	n, err := strconv.ParseFloat(num, 64)
	if !ok || err != nil || n <= 0 || n*float64(uint64(1)<<shift) >= 1<<62 {
		return fmt.Errorf("%q is not a size (such as 500MiB, 2GiB or 1048576)", v)
	}
	*b = byteSize(n * float64(uint64(1)<<shift))
	return nil
}
