package crabbox

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"path/filepath"
	"slices"
	"strings"
	gosync "sync"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/crabbox-dev/crabbox/coordinator/api"
	coordclient "github.com/crabbox-dev/crabbox/coordinator/client"
	"github.com/crabbox-dev/crabbox/history"
	"github.com/crabbox-dev/crabbox/provider"
	"github.com/crabbox-dev/crabbox/run/junit"

	"github.com/crabbox-dev/crabbox/internal/remote"
	"github.com/crabbox-dev/crabbox/lease"
	"github.com/crabbox-dev/crabbox/run"
	"github.com/crabbox-dev/crabbox/sync"
)

// RunRequest is one command run on a box: acquire (or reuse), sync, run,
// release per policy.
type RunRequest struct {
	// Lease is the ID or slug of a warm lease to reuse; empty acquires a new
	// lease that is released after the run unless Keep is set.
	Lease string
	// Acquire shapes a new lease (ignored when Lease is set).
	Acquire AcquireOptions
	// From is a checkpoint (ID or name) the new lease starts from, as
	// Client.Fork starts it; it cannot go with Lease.
	From string
	// Command is the argv to run; Shell is a shell command string instead;
	// Script is the content of a script run by sh. Set exactly one, or
	// none with SyncOnly.
	Command []string
	Shell   string
	Script  string
	// ScriptName names the script in the run history.
	ScriptName string
	// ScriptArgs are the script's arguments ($1, $2, ...); only with
	// Script.
	ScriptArgs []string
	// Root is the local directory the run starts from. It must be inside
	// a git checkout, which it stands for: the whole checkout is synced,
	// to the lease's Workdir for it, and the command runs in the same
	// directory there. A Root outside any git checkout is refused
	// (ErrNotCheckout), so that a run from the wrong directory uploads
	// nothing, unless PlainDir or NoSync is set.
	//
	// Client.Run defaults to the current directory. Lease.Run defaults to
	// the handle's SyncedDir, the directory last synced through it (by
	// Lease.Sync, or a Lease.Run that synced): the command runs in that
	// directory's copy on the box, synced again unless NoSync. A Lease.Run
	// without Root on a handle that synced nothing fails (ErrPrecondition)
	// before anything happens: Lease.Run never takes its directory from
	// the process's current directory.
	Root string
	// PlainDir lets Root be a plain directory outside any git checkout,
	// named on purpose: it is synced as it is (every file but .git
	// directories and the excludes). Inside a git checkout it changes
	// nothing. Whatever PlainDir says, a home directory, a directory
	// holding one and crabbox's state directory (or one holding it) are
	// never synced (ErrUnsafeSyncDir).
	PlainDir bool
	// NoSync syncs nothing: the command runs in the workdir as the box
	// has it.
	NoSync bool
	// SyncOnly syncs the checkout and runs nothing.
	SyncOnly bool
	// Keep keeps a newly acquired lease after the run.
	Keep bool
	// KeepOnFailure keeps a newly acquired lease when the command exits
	// non-zero (timeouts included), so it can be inspected.
	KeepOnFailure bool
	// Timeout bounds the command (not acquire or sync). When it passes the
	// command's process group is stopped and the exit code is
	// run.ExitTimeout (124), as with timeout(1).
	Timeout time.Duration
	// JUnit is a glob, relative to the workdir on the box and expanded by
	// the box's shell, of JUnit XML files to count after the command.
	// Several globs may be separated by spaces.
	JUnit string
	// FailOnTestFailures makes a run whose command exited 0 but whose
	// JUnit reports count failures or errors exit 1: RunResult.ExitCode,
	// the history and the coordinator's record all say 1 (and
	// KeepOnFailure applies). It needs JUnit.
	FailOnTestFailures bool
	// Artifacts are globs of files to bring home after the command,
	// relative to its workdir on the box (path.Match elements, ** for any
	// number of directories; a matched directory takes the files below
	// it; see run.Fetch). They are fetched also when the command fails or
	// times out, before a one-shot lease is released, in one tar stream
	// over the lease's connection, into ArtifactsDir keeping their paths.
	// The files of the JUnit globs come home with them. A glob that
	// matches nothing is reported in RunResult.ArtifactsUnmatched. What
	// the globs and Downloads name that cannot come home safely (a name
	// with a line break, a symlink leading outside the workdir, a symlink
	// to a directory below a glob, a symlink to nothing, a download the
	// box does not have) stays on the box and is reported in
	// RunResult.ArtifactsSkipped; the other files still come home. The
	// run fails for it only with ArtifactsStrict.
	Artifacts []string
	// ArtifactsDir is where artifacts go (default: the run's directory in
	// the state directory, <state>/artifacts/<run ID>).
	ArtifactsDir string
	// ArtifactsMaxBytes bounds the total size of the artifacts and
	// downloads (0: run.DefaultMaxFetchBytes); a run whose files exceed
	// it brings none of them home and fails with run.ErrFetchTooLarge.
	ArtifactsMaxBytes int64
	// ArtifactsOverwrite lets artifacts, downloads and captured streams
	// replace existing local files; without it a run that would replace
	// one fails (run.ErrFileExists) and changes nothing.
	ArtifactsOverwrite bool
	// ArtifactsStrict makes a run whose command exited 0 but whose
	// artifacts or downloads did not all come home (RunResult.
	// ArtifactsSkipped is not empty) fail with an error wrapping
	// run.ErrIncomplete; the files that did come home stay, and the
	// result is complete. A command that exited non-zero keeps its exit
	// code and Run no error for it: the run failed already.
	ArtifactsStrict bool
	// Downloads are single files to bring home with the artifacts, each
	// from its path relative to the workdir on the box (which it never
	// leaves) to its local path: relative to DownloadDir (default: the
	// current directory), or absolute; the caller's local path is
	// trusted, ".." included, and its missing directories are created.
	Downloads   []run.Download
	DownloadDir string
	// CaptureStdout and CaptureStderr are local files the command's
	// stdout and stderr are also written to (they still reach Stdout and
	// Stderr); their missing directories are created. With CaptureOnFail
	// they are kept only when the run fails (a non-zero exit or an
	// error).
	CaptureStdout string
	CaptureStderr string
	CaptureOnFail bool
	// RunID identifies the run. Empty (the usual case) gives it the
	// coordinator's run ID when the client has a coordinator and it
	// records the run, else a new lease.NewRunID(). A RunID set here is
	// kept as the local ID, and the coordinator's own ID of the run is
	// RunResult.CoordinatorRunID (the history keeps both; Client.RunLog
	// finds the run by either).
	RunID string
	// RecordHistory records the run and its output (the last
	// history.DefaultLogLimit bytes) in the client's run history (Client.History).
	RecordHistory bool
	// Env holds the variables to set on the box (already allow-listed).
	Env map[string]string
	// Stdin, if set, is the command's standard input, forwarded as it is
	// read; the command sees end of file at its end (see run.Command.Stdin,
	// also for a Stdin that blocks after the command ended). Nil gives the
	// command an empty stdin (/dev/null). A delegated provider whose API
	// cannot forward stdin refuses a run with Stdin before anything is
	// acquired or run.
	Stdin  io.Reader
	Stdout io.Writer
	Stderr io.Writer
	// SyncProgress, if set, is called as files are sent.
	SyncProgress func(files int, bytes int64)
	// Checksum, FullResync, ForceSyncLarge, SyncWarn, SyncExclude,
	// RefuseOutsideLinks and SkipSubmodules are passed to the sync (see
	// SyncOptions).
	Checksum       bool
	FullResync     bool
	ForceSyncLarge bool
	SyncWarn       func(string)
	SyncExclude    []string
	// RefuseOutsideLinks and SkipSubmodules: see SyncOptions.
	RefuseOutsideLinks bool
	SkipSubmodules     bool

	// onLease, if set, is called once the run has its lease (brokered.go).
	onLease func(*Lease)
}

// Timing is where a run's time went.
type Timing struct {
	Lease   time.Duration
	Connect time.Duration
	Sync    time.Duration
	Command time.Duration
	Total   time.Duration
}

// RunResult is the outcome of Client.Run.
type RunResult struct {
	// RunID is the run's ID in the history, the artifacts directory and
	// errors: with a coordinator that recorded the run, the coordinator's
	// run ID (so crabbox logs and the portal find it from any machine),
	// unless RunRequest.RunID chose one; else a local ID.
	RunID string
	// CoordinatorRunID is the coordinator's ID of this run when a
	// coordinator recorded it: RunID itself unless RunRequest.RunID chose
	// another. It is empty without a coordinator, or when the coordinator
	// did not record the run (CoordinatorErr says why).
	CoordinatorRunID string
	// CoordinatorErr is set when the client has a coordinator but the
	// run could not be created there (it could not be reached, or
	// refused): the run went on all the same, and its RunID is a local ID
	// that only this state directory's history knows. It does not make
	// Run fail.
	CoordinatorErr error
	LeaseID        string
	Slug           string
	Provider       string
	// Pool is set when the run asked for a ready pool
	// (RunRequest.Acquire.Pool): Hit says whether its box came from it.
	Pool *LeasePool
	// StartedAt is when the run started.
	StartedAt time.Time
	// Kept is set when the lease is still held after the run.
	Kept bool
	// ExitCode is the run's exit code: the remote command's (128+n for
	// signal n), or 1 when RunRequest.FailOnTestFailures turned a
	// command's 0 into a failure (TestsFailed is then set).
	ExitCode int
	// TestsFailed is set when RunRequest.FailOnTestFailures made the run
	// fail: the command exited 0, but its JUnit reports count failures or
	// errors.
	TestsFailed bool
	// TimedOut is set when RunRequest.Timeout stopped the command.
	TimedOut bool
	Sync     sync.Stats
	// SyncSkipped is set when nothing was sent: NoSync, or the checkout
	// on the box was already up to date.
	SyncSkipped bool
	// JUnit is set when RunRequest.JUnit was.
	JUnit *junit.Report
	// Artifacts are the files the run brought home: artifacts,
	// downloads and the captured streams.
	Artifacts []run.Artifact
	// ArtifactsDir is where the artifacts went, when the run had globs
	// to fetch; ArtifactsUnmatched are those that matched nothing.
	ArtifactsDir       string
	ArtifactsUnmatched []string
	// ArtifactsSkipped are the files the artifacts' globs and the
	// downloads named that stayed on the box, with the reason, sorted
	// by path (see RunRequest.Artifacts and ArtifactsStrict).
	ArtifactsSkipped []run.Skipped
	Timing           Timing
	// ReleaseErr is set when the run's own lease could not be released
	// after the run: its claim stays in the lease store, marked failed,
	// and Client.Cleanup (or Stop) releases it later. It does not make
	// Run fail: the command ran, and ExitCode is its exit code. (When Run
	// fails for another reason, its error includes ReleaseErr too.)
	ReleaseErr error
}

// Run is the one-shot workflow: acquire a lease (or resolve req.Lease),
// sync, run, release per policy. It is composed of the same steps as
// Lease.Run, so both give the same exit codes, timeouts, history and
// coordinator records. The returned error is crabbox's own failure
// (config, lease, connection, sync); the command's exit code, zero or not,
// is in the result.
func (c *Client) Run(ctx context.Context, req RunRequest) (RunResult, error) {
	if err := c.ready(ctx, "run"); err != nil {
		return RunResult{}, err
	}
	if req.From != "" && req.Lease != "" {
		return RunResult{}, fmt.Errorf("run: a run starts a new lease from checkpoint %s or reuses lease %s, not both", req.From, req.Lease)
	}
	return c.recorded(ctx, req, nil, func(req RunRequest, co sync.Checkout, started RunResult) (res RunResult, err error) {
		res = started
		if b, ok := c.delegatedFor(req); ok {
			if err := checkDelegated(b, req); err != nil {
				return res, err
			}
		}
		// The local half of the sync (listing and hashing the checkout)
		// needs no box: it runs while the lease is acquired.
		prep := c.prepare(ctx, req, co)
		defer prep.stop()
		l, acquired, err := c.leaseFor(ctx, req)
		if err != nil {
			return res, err
		}
		res.Timing.Lease = c.rt.Clock.Since(res.StartedAt)
		res.Kept = !acquired || req.Keep
		defer func() {
			if acquired && req.KeepOnFailure && err == nil && res.ExitCode != 0 {
				res.Kept = true
				// The lease now outlives this process (see AcquireOptions.Keep).
				if _, kerr := c.store.Update(l.ID(), func(cl *lease.Claim) error { cl.Keep = true; return nil }); kerr != nil {
					c.log.Warn("kept lease not marked kept; cleanup may release it once this process ends", "lease", l.ID(), "err", kerr)
				}
			}
			if res.Kept {
				err = errors.Join(err, l.Close())
				return
			}
			// Release goes on when ctx is cancelled: a one-shot lease must not outlive the run.
			res.ReleaseErr = c.releaseOneShot(context.WithoutCancel(ctx), l)
			if err != nil {
				err = errors.Join(err, res.ReleaseErr)
			}
		}()
		return l.run(ctx, req, co, prep, res)
	})
}

// Run runs req on the held lease: sync the checkout holding req.Root (unless
// NoSync; an empty Root is the handle's SyncedDir, see RunRequest.Root),
// run the command in the matching directory, with req.Timeout
// (exit 124), JUnit counting, artifacts, downloads and captured streams
// brought home, and the run recorded in the client's history
// (RecordHistory) and with its coordinator, exactly as Client.Run does.
// The lease is kept: req.Lease, Acquire, Keep and KeepOnFailure, which
// choose and release a lease, apply to Client.Run only and are ignored.
func (l *Lease) Run(ctx context.Context, req RunRequest) (RunResult, error) {
	if err := l.use(ctx, "run"); err != nil {
		return RunResult{}, err
	}
	if req.Root == "" {
		dir := l.SyncedDir()
		if dir == "" {
			return RunResult{}, fmt.Errorf("run on lease %s: no directory to run in: RunRequest.Root is empty and the handle synced nothing; set Root to the local directory whose copy on the box the command runs in: %w",
				l.ID(), ErrPrecondition)
		}
		req.Root, req.PlainDir = dir, true // synced on purpose
	}
	req.Lease, req.Acquire, req.Keep, req.KeepOnFailure = l.ID(), AcquireOptions{}, false, false
	return l.client.recorded(ctx, req, l, func(req RunRequest, co sync.Checkout, res RunResult) (RunResult, error) {
		res.Kept = true
		prep := l.client.prepare(ctx, req, co)
		defer prep.stop()
		res, err := l.run(ctx, req, co, prep, res)
		if err == nil && !req.NoSync {
			l.noteSynced(co)
		}
		return res, err
	})
}

// recorded checks req, settles its checkout (a run refused for where it
// starts leaves no lease, history or record behind), and runs fn with the
// run recorded: with the coordinator when there is one, and in the local
// history when req.RecordHistory is set. held is the lease of a Lease.Run
// (nil for Client.Run).
func (c *Client) recorded(ctx context.Context, req RunRequest, held *Lease, fn func(RunRequest, sync.Checkout, RunResult) (RunResult, error)) (res RunResult, err error) {
	if err := req.check(); err != nil {
		return res, err
	}
	co, err := c.runDir(ctx, req)
	if err != nil {
		return res, fmt.Errorf("run: %w", err)
	}
	// With a coordinator the run is created there first: its ID is the
	// run's ID everywhere (history, logs, artifacts, the portal).
	var rec *runRecorder
	if c.broker != nil {
		rec = c.recordRun(ctx, req, held)
		defer func() { rec.finish(res, err) }()
	}
	if req.RunID == "" {
		req.RunID = cmp.Or(rec.id(), lease.NewRunID())
	}
	if rec != nil {
		req = rec.tee(req)
	}
	if req.ArtifactsDir == "" && len(req.fetchGlobs()) > 0 {
		req.ArtifactsDir = filepath.Join(c.StateDir(), "artifacts", req.RunID)
	}
	start := c.rt.Clock.Now()
	res = RunResult{RunID: req.RunID, CoordinatorRunID: rec.id(), StartedAt: start}
	if rec != nil {
		res.CoordinatorErr = rec.createErr
	}
	caps, err := openCaptures(req)
	if err != nil {
		return res, err
	}
	var log *history.Log
	if req.RecordHistory {
		if log, err = c.History().CreateLog(req.RunID); err != nil {
			caps.discard()
			return res, err
		}
	}
	req.Stdout, req.Stderr = teeStreams(req.Stdout, req.Stderr, log, caps)
	res, err = fn(req, co, res)
	if err == nil {
		err = req.incomplete(res)
	}
	captured, cerr := caps.finish(!req.CaptureOnFail || err != nil || res.ExitCode != 0)
	res.Artifacts = append(res.Artifacts, captured...)
	err = errors.Join(err, cerr)
	res.Timing.Total = c.rt.Clock.Since(start)
	if log == nil {
		return res, err
	}
	if lerr := log.Close(); lerr != nil {
		c.log.Warn("run log incomplete", "run", req.RunID, "err", lerr)
	}
	if herr := c.History().Append(historyEntry(req, res, err)); herr != nil {
		c.log.Warn("run not recorded in history", "run", req.RunID, "err", herr)
	}
	return res, err
}

func (req RunRequest) check() error {
	given := 0
	for _, set := range []bool{len(req.Command) > 0, req.Shell != "", req.Script != ""} {
		if set {
			given++
		}
	}
	switch {
	case req.SyncOnly && given > 0:
		return errors.New("run: a sync-only run takes no command")
	case req.SyncOnly && req.NoSync:
		return errors.New("run: sync-only and no-sync contradict each other")
	case !req.SyncOnly && given == 0:
		return errors.New("run: no command given")
	case given > 1:
		return errors.New("run: give one of a command, a shell command line and a script")
	case req.RunID != "" && !lease.IsRunID(req.RunID):
		return fmt.Errorf("run: run ID %q is malformed: want run_ and 12 lowercase hex digits", req.RunID)
	case req.Timeout < 0:
		return fmt.Errorf("run: negative timeout %s", req.Timeout)
	case len(req.ScriptArgs) > 0 && req.Script == "":
		return errors.New("run: script arguments without a script")
	case req.FailOnTestFailures && req.JUnit == "":
		return errors.New("run: failing on test failures needs JUnit reports to count")
	}
	if req.JUnit != "" {
		if err := junit.CheckGlob(req.JUnit); err != nil {
			return err
		}
	}
	switch {
	case req.ArtifactsMaxBytes < 0:
		return fmt.Errorf("run: negative artifacts size limit %d", req.ArtifactsMaxBytes)
	case req.CaptureOnFail && req.CaptureStdout == "" && req.CaptureStderr == "":
		return errors.New("run: capturing on failure needs a stream to capture (CaptureStdout or CaptureStderr)")
	case req.CaptureStdout != "" && req.CaptureStdout == req.CaptureStderr:
		return fmt.Errorf("run: stdout and stderr are both captured to %s; give them a file each", req.CaptureStdout)
	}
	return req.fetch("").Check()
}

// incomplete is the error of a run with ArtifactsStrict whose command
// exited 0 but whose results did not all come home.
func (req RunRequest) incomplete(res RunResult) error {
	skipped := res.ArtifactsSkipped
	if !req.ArtifactsStrict || len(skipped) == 0 || res.ExitCode != 0 {
		return nil
	}
	var named []string
	for _, s := range skipped[:min(len(skipped), 3)] {
		named = append(named, fmt.Sprintf("%q: %s", s.Path, s.Reason))
	}
	if len(skipped) > 3 {
		named = append(named, fmt.Sprintf("and %d more", len(skipped)-3))
	}
	return fmt.Errorf("run %s: the command exited 0, but %d of the files to bring home stayed on the box (%s): %w",
		req.RunID, len(skipped), strings.Join(named, "; "), run.ErrIncomplete)
}

// fetchGlobs are the globs whose files come home after the command: the
// artifacts and the JUnit reports.
func (req RunRequest) fetchGlobs() []string {
	globs := slices.Clone(req.Artifacts)
	if req.JUnit != "" {
		globs = append(globs, strings.Fields(req.JUnit)...)
	}
	return globs
}

// fetch is what req brings home from workdir on the box.
func (req RunRequest) fetch(workdir string) run.Fetch {
	return run.Fetch{
		Dir: workdir, Globs: req.fetchGlobs(), ArtifactsDir: req.ArtifactsDir,
		Downloads: req.Downloads, DownloadDir: req.DownloadDir,
		MaxBytes: req.ArtifactsMaxBytes, Overwrite: req.ArtifactsOverwrite,
	}
}

func historyEntry(req RunRequest, res RunResult, err error) history.Entry {
	e := history.Entry{
		RunID: req.RunID, CoordinatorRunID: res.CoordinatorRunID, LeaseID: res.LeaseID, Slug: res.Slug, Provider: res.Provider,
		Command: displayCommand(req), StartedAt: res.StartedAt, ExitCode: res.ExitCode,
		LeaseMs: res.Timing.Lease.Milliseconds(), SyncMs: res.Timing.Sync.Milliseconds(),
		SyncSkipped: res.SyncSkipped, CommandMs: res.Timing.Command.Milliseconds(),
		TotalMs: res.Timing.Total.Milliseconds(), Kept: res.Kept, TimedOut: res.TimedOut,
	}
	if err != nil {
		e.Error = err.Error()
	}
	if res.JUnit != nil {
		counts := res.JUnit.Counts
		e.JUnit = &counts
	}
	e.ArtifactsDir, e.Artifacts = res.ArtifactsDir, res.Artifacts
	return e
}

// runDir is where a run starts and what it syncs (see RunRequest.Root).
func (c *Client) runDir(ctx context.Context, req RunRequest) (sync.Checkout, error) {
	if req.NoSync {
		return sync.FindCheckout(ctx, req.Root)
	}
	return sync.FindSyncRoot(ctx, req.Root, req.PlainDir, c.store.Dir())
}

// preparation is the local half of a sync (listing and hashing the
// checkout), which needs no box, running in the background.
type preparation struct {
	prep   *sync.Prepared
	err    error
	done   chan struct{} // closed when prep and err are set
	cancel context.CancelFunc
}

// prepare starts the local half of req's sync of co (none for NoSync).
func (c *Client) prepare(ctx context.Context, req RunRequest, co sync.Checkout) *preparation {
	p := &preparation{done: make(chan struct{}), cancel: func() {}}
	if b, ok := c.delegatedFor(req); ok {
		if _, files := fileBackend(b); !files {
			req.NoSync = true // the provider syncs co.Root itself
		}
	}
	if req.NoSync {
		close(p.done)
		return p
	}
	ctx, p.cancel = context.WithCancel(ctx)
	go func() {
		defer close(p.done)
		p.prep, p.err = c.prepareSync(ctx, co.Root, SyncOptions{
			Progress: req.SyncProgress, Checksum: req.Checksum, FullResync: req.FullResync,
			ForceLarge: req.ForceSyncLarge, Warn: req.SyncWarn, Exclude: req.SyncExclude,
			RefuseOutsideLinks: req.RefuseOutsideLinks, SkipSubmodules: req.SkipSubmodules,
		})
	}()
	return p
}

// wait returns the prepared sync once it is ready.
func (p *preparation) wait() (*sync.Prepared, error) {
	<-p.done
	return p.prep, p.err
}

// stop cancels the preparation if it still runs and waits for it.
func (p *preparation) stop() {
	p.cancel()
	<-p.done
}

// run is a run's work on the lease, once it has one: connect, sync
// (prepared by prep), run the command, count JUnit reports.
func (l *Lease) run(ctx context.Context, req RunRequest, co sync.Checkout, prep *preparation, res RunResult) (RunResult, error) {
	if l.delegated != nil {
		return l.runDelegated(ctx, req, co, prep, res) // delegated.go
	}
	c := l.client
	res.LeaseID, res.Slug, res.Provider = l.ID(), l.Slug(), l.Provider()
	if key := req.Acquire.Pool; key != "" && req.Lease == "" {
		res.Pool = poolAsked(key, l.Claim())
	}
	if req.onLease != nil {
		req.onLease(l)
	}
	workdir := path.Join(l.Workdir(co.Root), co.Rel)
	connectStart := c.rt.Clock.Now()
	if _, err := l.SSH(ctx); err != nil {
		return res, err
	}
	res.Timing.Connect = c.rt.Clock.Since(connectStart)
	syncStart := c.rt.Clock.Now()
	// When the box can be checked for the prepared checkout (or the
	// workdir created) by a condition, that condition runs in the
	// command's own session, and a sync happens only if it fails: an
	// unchanged checkout costs no round trip of its own.
	var precondition string
	prepared, err := prep.wait()
	switch {
	case req.NoSync:
		precondition = "mkdir -p -- " + remote.Quote(workdir)
	case err != nil:
	default:
		if err = l.syncTo(prepared); err != nil {
			break
		}
		if check, ok := prepared.UnchangedCheck(); ok && !req.SyncOnly {
			precondition = check
			res.Sync = prepared.Unchanged()
		} else {
			res.Sync, err = l.pushPrepared(ctx, prepared)
		}
	}
	res.Timing.Sync = c.rt.Clock.Since(syncStart)
	res.SyncSkipped = req.NoSync || res.Sync.Skipped
	if prepared != nil {
		c.startWantedWatch(ctx, prepared.Root())
	}
	if err != nil || req.SyncOnly {
		return res, err
	}

	res.ExitCode, res.TimedOut, err = l.command(ctx, req, workdir, precondition, &res.Timing)
	if errors.Is(err, run.ErrPreconditionFailed) {
		// The box differs from the prepared checkout (or the workdir
		// could not be made): sync as usual, then run.
		res.Timing.Sync += res.Timing.Command
		syncStart := c.rt.Clock.Now()
		if req.NoSync {
			err = l.ensureDir(ctx, workdir)
		} else {
			res.Sync, err = l.pushPrepared(ctx, prepared)
		}
		res.Timing.Sync += c.rt.Clock.Since(syncStart)
		res.SyncSkipped = req.NoSync || res.Sync.Skipped
		if err != nil {
			return res, err
		}
		res.ExitCode, res.TimedOut, err = l.command(ctx, req, workdir, "", &res.Timing)
	}
	if err != nil {
		return res, missingRunDir(ctx, err, req, co, prepared)
	}
	if f := req.fetch(workdir); len(f.Globs)+len(f.Downloads) > 0 {
		if err := l.fetch(ctx, f, &res); err != nil {
			return res, err
		}
	}
	if req.JUnit != "" {
		conn, err := l.SSH(ctx)
		if err != nil {
			return res, err
		}
		rep, err := junit.Collect(ctx, conn, workdir, req.JUnit)
		if err != nil {
			return res, fmt.Errorf("junit on %s: %w", l.ID(), err)
		}
		res.JUnit = &rep
		if req.FailOnTestFailures && res.ExitCode == 0 && rep.Failures+rep.Errors > 0 {
			res.ExitCode, res.TestsFailed = 1, true
		}
	}
	return res, nil
}

// fetch brings f's files home into res (see RunRequest.Artifacts): over
// SSH, or through a delegated sandbox's file API.
func (l *Lease) fetch(ctx context.Context, f run.Fetch, res *RunResult) error {
	l.keep.Used()
	var got run.FetchResult
	var err error
	if l.delegated != nil {
		got, err = l.fetchDelegated(ctx, f) // delegated.go
	} else {
		var conn *ssh.Client
		if conn, err = l.SSH(ctx); err != nil {
			return err
		}
		got, err = run.FetchFiles(ctx, conn, f)
	}
	if err != nil {
		return fmt.Errorf("bring files home from %s (the command exited %d): %w", l.ID(), res.ExitCode, err)
	}
	if len(f.Globs) > 0 {
		res.ArtifactsDir = f.ArtifactsDir
	}
	res.Artifacts, res.ArtifactsUnmatched, res.ArtifactsSkipped = got.Files, got.Unmatched, got.Skipped
	return nil
}

// missingRunDir explains a run whose directory is missing on the box
// after the sync: the sync sent nothing in it, because it holds no files
// (git does not track empty directories) or because everything in it is
// ignored or excluded. Other errors are returned as they are.
func missingRunDir(ctx context.Context, err error, req RunRequest, co sync.Checkout, prepared *sync.Prepared) error {
	if req.NoSync || prepared == nil || !errors.Is(err, fs.ErrNotExist) || prepared.Holds(ctx, co.Rel) {
		return err
	}
	why := "everything in it is ignored by git or left out of the sync (a default exclude, .crabboxignore or a sync exclude)"
	todo := "stop excluding it"
	if !holdsFiles(filepath.Join(co.Root, filepath.FromSlash(co.Rel))) {
		why = "it holds no files, and git does not track empty directories"
		todo = "add a file to it"
	}
	return fmt.Errorf("run from %s: the directory is not on the box, because %s; %s, or run from the checkout's top (%s): %w", co.Rel, why, todo, co.Root, err)
}

// holdsFiles reports whether the local directory dir has a file (anything
// but a directory) anywhere below it.
func holdsFiles(dir string) bool {
	found := errors.New("found")
	err := filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			return found
		}
		return nil
	})
	return errors.Is(err, found)
}

// releaseOneShot releases a run's own lease. When the provider could not
// release it, the claim stays, marked failed so that cleanup releases it,
// and the error is returned; a connection that closed badly after a
// release is only logged.
func (c *Client) releaseOneShot(ctx context.Context, l *Lease) error {
	err := l.Release(ctx)
	if err == nil {
		return nil
	}
	id := l.ID()
	_, uerr := c.store.Update(id, func(cl *lease.Claim) error { cl.State = lease.StateFailed; return nil })
	if errors.Is(uerr, ErrNotFound) {
		c.log.Warn("lease released; its connection did not close cleanly", "lease", id, "err", err)
		return nil
	}
	c.log.Warn("lease not released; its claim stays for cleanup", "lease", id, "err", err)
	if uerr != nil {
		return errors.Join(err, uerr)
	}
	return err // "release lease <ID>: ..."
}

// command runs the request's command in workdir, within its timeout.
// A precondition that fails on the box is an error wrapping
// run.ErrPrecondition, and nothing ran.
func (l *Lease) command(ctx context.Context, req RunRequest, workdir, precondition string, t *Timing) (exit int, timedOut bool, err error) {
	c := l.client
	cmdCtx := ctx
	if req.Timeout > 0 {
		var cancel context.CancelFunc
		cmdCtx, cancel = context.WithTimeout(ctx, req.Timeout)
		defer cancel()
	}
	shell := req.Shell
	if req.Script != "" {
		shell = scriptWithArgs(req.Script, req.ScriptArgs)
	}
	cmdStart := c.rt.Clock.Now()
	out, err := l.Exec(cmdCtx, run.Command{
		Command: req.Command, Shell: shell, Dir: workdir, Env: req.Env,
		Stdin: req.Stdin, Stdout: req.Stdout, Stderr: req.Stderr, Precondition: precondition,
	})
	t.Command = c.rt.Clock.Since(cmdStart)
	if err != nil && ctx.Err() == nil && errors.Is(cmdCtx.Err(), context.DeadlineExceeded) {
		return run.ExitTimeout, true, nil
	}
	return out.ExitCode, false, err
}

func (c *Client) leaseFor(ctx context.Context, req RunRequest) (l *Lease, acquired bool, err error) {
	if req.Lease != "" {
		l, err = c.Resolve(ctx, req.Lease)
		return l, false, err
	}
	opts := req.Acquire
	opts.Keep = opts.Keep || req.Keep
	if req.From != "" {
		l, err = c.Fork(ctx, req.From, opts)
		return l, true, err
	}
	l, err = c.Acquire(ctx, opts)
	return l, true, err
}

// ensureDir creates dir on the box (used when sync is skipped), relative
// to the login directory like the sync's and the command's.
func (l *Lease) ensureDir(ctx context.Context, dir string) error {
	res, err := l.Exec(ctx, run.Command{Command: []string{"mkdir", "-p", "--", dir}})
	if err != nil {
		return err
	}
	if res.ExitCode != 0 {
		return fmt.Errorf("create workdir %s on %s: mkdir exited %d", dir, l.ID(), res.ExitCode)
	}
	return nil
}

// teeStreams returns stdout and stderr copied to the run's log and
// captures, when it has them.
func teeStreams(stdout, stderr io.Writer, log *history.Log, caps captures) (io.Writer, io.Writer) {
	var toOut, toErr []io.Writer
	if log != nil {
		toOut, toErr = append(toOut, log), append(toErr, log)
	}
	if caps.stdout != nil {
		toOut = append(toOut, caps.stdout)
	}
	if caps.stderr != nil {
		toErr = append(toErr, caps.stderr)
	}
	if len(toOut)+len(toErr) == 0 {
		return stdout, stderr
	}
	var mu gosync.Mutex
	return &teeWriter{mu: &mu, w: stdout, copies: toOut}, &teeWriter{mu: &mu, w: stderr, copies: toErr}
}

// teeWriter copies what is written to w into copies as well, ignoring
// their errors (a full disk must not stop the command). Both tees of a run
// share mu, so a writer given as both stdout and stderr still sees one
// write at a time.
type teeWriter struct {
	mu     *gosync.Mutex
	w      io.Writer
	copies []io.Writer
}

func (t *teeWriter) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, c := range t.copies {
		_, _ = c.Write(p)
	}
	if t.w == nil {
		return len(p), nil
	}
	return t.w.Write(p)
}

// scriptWithArgs is the shell text that runs script with args as its
// positional parameters: a first line sets them (the script's own first
// line, a #! line included, follows unchanged), so they reach the box in
// the command's text, never in a process's arguments.
func scriptWithArgs(script string, args []string) string {
	if len(args) == 0 {
		return script
	}
	words := []string{"set", "--"}
	for _, a := range args {
		words = append(words, remote.Quote(a))
	}
	return strings.Join(words, " ") + "\n" + script
}

// displayCommand is a run's command as history shows it.
func displayCommand(req RunRequest) string {
	switch {
	case req.SyncOnly:
		return "(sync only)"
	case req.Script != "":
		words := []string{"script"}
		if req.ScriptName != "" {
			words = append(words, req.ScriptName)
		}
		for _, a := range req.ScriptArgs {
			words = append(words, remote.Quote(a))
		}
		return strings.Join(words, " ")
	case req.Shell != "":
		return req.Shell
	}
	words := make([]string, len(req.Command))
	for i, w := range req.Command {
		words[i] = remote.Quote(w)
	}
	return strings.Join(words, " ")
}

// History is the run history in the client's state directory. For a
// Client not made by New every method of it fails.
func (c *Client) History() *history.History { return history.Open(c.StateDir()) }

// ErrCoordinatorRuns is wrapped by Runs's error when the coordinator could
// not be asked for its runs: the local ones are still returned.
var ErrCoordinatorRuns = errors.New("coordinator runs not listed")

// Runs lists the recorded runs, newest first, at most limit of them (0:
// all): the local history and, with a coordinator, the user's runs it
// recorded that this state directory did not (Elsewhere; another machine,
// CI). A local run the coordinator also recorded is listed once, with its
// CoordinatorRunID.
func (c *Client) Runs(ctx context.Context, limit int) ([]history.Entry, error) {
	if err := c.ready(ctx, "list runs"); err != nil {
		return nil, err
	}
	local, err := c.History().List(limit)
	if err != nil || c.broker == nil {
		return local, err
	}
	linked := map[string]bool{}
	for _, e := range local {
		linked[e.CoordinatorRunID] = true
	}
	remote, err := c.broker.coord.ListRuns(ctx, coordclient.ListRunsOptions{Limit: cmp.Or(limit, 500)})
	if err != nil {
		return local, fmt.Errorf("%w: %w", ErrCoordinatorRuns, err)
	}
	out := local
	for _, r := range remote {
		if !linked[r.ID] {
			out = append(out, entryOfCoordinatorRun(r))
		}
	}
	slices.SortStableFunc(out, func(a, b history.Entry) int { return b.StartedAt.Compare(a.StartedAt) })
	if limit > 0 && len(out) > limit {
		out = out[:limit]
	}
	return out, nil
}

// RunLog is a recorded run's output: from the local history, else, with a
// coordinator, the coordinator's copy (a run made elsewhere, or looked up
// by its coordinator run ID).
func (c *Client) RunLog(ctx context.Context, runID string) ([]byte, error) {
	if err := c.ready(ctx, "log of run "+runID); err != nil {
		return nil, err
	}
	out, err := c.History().Log(runID)
	if err == nil || c.broker == nil || !errors.Is(err, provider.ErrNotFound) {
		return out, err
	}
	log, cerr := c.broker.coord.RunLog(ctx, runID)
	if cerr != nil {
		if errors.Is(cerr, provider.ErrNotFound) {
			return nil, fmt.Errorf("run %s: not in the run history, nor at the coordinator: %w", runID, provider.ErrNotFound)
		}
		return nil, fmt.Errorf("%w (and the coordinator: %w)", err, cerr)
	}
	return []byte(log), nil
}

// entryOfCoordinatorRun describes a coordinator's run record as a history
// entry.
func entryOfCoordinatorRun(r api.Run) history.Entry {
	e := history.Entry{
		RunID: r.ID, CoordinatorRunID: r.ID, Elsewhere: true, LeaseID: r.LeaseID, Slug: r.Slug, Provider: r.Provider,
		Command: run.QuoteCommand(r.Command), StartedAt: r.StartedAt, SyncMs: r.SyncMs, CommandMs: r.CommandMs, TotalMs: r.DurationMs,
	}
	switch {
	case r.ExitCode != nil:
		e.ExitCode = *r.ExitCode
	case r.State == api.RunRunning:
		e.Error = "still running"
	default:
		e.Error = "ended without an exit code"
	}
	if res := r.Results; res != nil {
		e.JUnit = &junit.Counts{Tests: res.Tests, Failures: res.Failures, Errors: res.Errors, Skipped: res.Skipped}
	}
	return e
}

// captures are a run's captured streams (RunRequest.CaptureStdout and
// CaptureStderr); either may be nil.
type captures struct{ stdout, stderr *run.Capture }

// openCaptures starts req's captures. A capture that cannot start (its
// file exists, its directory is missing) fails the run before anything
// happens.
func openCaptures(req RunRequest) (captures, error) {
	var c captures
	var err error
	if req.CaptureStdout != "" {
		if c.stdout, err = run.CreateCapture(run.KindStdout, req.CaptureStdout, req.ArtifactsOverwrite); err != nil {
			return captures{}, fmt.Errorf("run: %w", err)
		}
	}
	if req.CaptureStderr != "" {
		if c.stderr, err = run.CreateCapture(run.KindStderr, req.CaptureStderr, req.ArtifactsOverwrite); err != nil {
			c.discard()
			return captures{}, fmt.Errorf("run: %w", err)
		}
	}
	return c, nil
}

// finish keeps the captured files (or removes them) and returns those kept.
func (c captures) finish(keep bool) ([]run.Artifact, error) {
	var out []run.Artifact
	var errs []error
	for _, cp := range []*run.Capture{c.stdout, c.stderr} {
		if cp == nil {
			continue
		}
		a, kept, err := cp.Finish(keep)
		if kept {
			out = append(out, a)
		}
		errs = append(errs, err)
	}
	return out, errors.Join(errs...)
}

// discard removes the captured files.
func (c captures) discard() { _, _ = c.finish(false) }
