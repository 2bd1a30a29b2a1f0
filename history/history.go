// Package history is the local record of runs, kept in crabbox's state
// directory so that past runs and their output can be listed without any
// server: history/runs.jsonl (one JSON entry per run, appended under a
// file lock) and history/logs/<runID>.log (the last LogLimit bytes of each
// run's output).
package history

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	gosync "sync"
	"time"

	"github.com/gofrs/flock"

	"github.com/crabbox-dev/crabbox/internal/diskspace"
	"github.com/crabbox-dev/crabbox/lease"
	"github.com/crabbox-dev/crabbox/provider"
	"github.com/crabbox-dev/crabbox/run"
	"github.com/crabbox-dev/crabbox/run/junit"
)

// DefaultLogLimit is how much of a run's output History keeps: the last
// 1 MiB.
const DefaultLogLimit = 1 << 20

// Entry is one run as the history records it.
type Entry struct {
	// RunID is the run's ID: the coordinator's run ID when a coordinator
	// recorded the run (unless the caller chose another), else a local
	// one.
	RunID string `json:"runId"`
	// CoordinatorRunID is the coordinator's ID of the run, when one
	// recorded it: RunID itself, or the coordinator's ID of a run whose
	// caller chose its RunID (and of runs recorded before crabbox used
	// the coordinator's ID). History.Log finds a run by either.
	CoordinatorRunID string `json:"coordinatorRunId,omitempty"`
	// Elsewhere marks a run the coordinator recorded that this state
	// directory did not (another machine, CI): Client.Runs lists those
	// after the local ones; they are never written here.
	Elsewhere   bool      `json:"elsewhere,omitempty"`
	LeaseID     string    `json:"leaseId,omitempty"`
	Slug        string    `json:"slug,omitempty"`
	Provider    string    `json:"provider,omitempty"`
	Command     string    `json:"command"`
	StartedAt   time.Time `json:"startedAt"`
	ExitCode    int       `json:"exitCode"`
	LeaseMs     int64     `json:"leaseMs"`
	SyncMs      int64     `json:"syncMs"`
	SyncSkipped bool      `json:"syncSkipped"`
	CommandMs   int64     `json:"commandMs"`
	TotalMs     int64     `json:"totalMs"`
	Kept        bool      `json:"kept,omitempty"`
	TimedOut    bool      `json:"timedOut,omitempty"`
	// Error is crabbox's own failure, if the run had one.
	Error string        `json:"error,omitempty"`
	JUnit *junit.Counts `json:"junit,omitempty"`
	// ArtifactsDir is where the run's artifacts went, and Artifacts are
	// the files it brought home (artifacts, downloads, captured streams).
	ArtifactsDir string         `json:"artifactsDir,omitempty"`
	Artifacts    []run.Artifact `json:"artifacts,omitempty"`
}

// History is the record of runs in one state directory.
type History struct {
	dir string
	// LogLimit bounds each run's stored output (default DefaultLogLimit).
	LogLimit int64
}

// Open returns the history kept under stateDir. It creates nothing until a
// run is recorded. With an empty stateDir (the state directory of a
// crabbox.Client not made by crabbox.New) every method fails: the history
// is never kept in the current directory by mistake.
func Open(stateDir string) *History {
	if stateDir == "" {
		return &History{LogLimit: DefaultLogLimit}
	}
	return &History{dir: filepath.Join(stateDir, "history"), LogLimit: DefaultLogLimit}
}

// errNoDir is the error of a History without a state directory.
var errNoDir = errors.New("run history: no state directory")

func (h *History) logPath(runID string) string {
	return filepath.Join(h.dir, "logs", runID+".log")
}

func (h *History) locked(fn func() error) error {
	if h.dir == "" {
		return errNoDir
	}
	if err := os.MkdirAll(h.dir, 0o700); err != nil {
		return fmt.Errorf("run history %s: %w", h.dir, err)
	}
	l := flock.New(filepath.Join(h.dir, ".lock"))
	if err := l.Lock(); err != nil {
		return fmt.Errorf("lock run history %s: %w", h.dir, err)
	}
	defer l.Unlock()
	return fn()
}

// Append records a run.
func (h *History) Append(e Entry) error {
	if !lease.IsRunID(e.RunID) {
		return fmt.Errorf("record run %q: malformed run ID", e.RunID)
	}
	line, err := json.Marshal(e)
	if err != nil {
		return fmt.Errorf("record run %s: %w", e.RunID, err)
	}
	return h.locked(func() error {
		f, err := os.OpenFile(filepath.Join(h.dir, "runs.jsonl"), os.O_RDWR|os.O_APPEND|os.O_CREATE, 0o600)
		if err != nil {
			return fmt.Errorf("record run %s: %w", e.RunID, err)
		}
		rec := append(line, '\n')
		// A write torn by a crash leaves the last line without its newline;
		// start on a fresh line so that this record is not glued to it
		// (List skips the torn line and keeps this one).
		torn, terr := endsTorn(f)
		if torn {
			rec = append([]byte{'\n'}, rec...)
		}
		var werr error
		if terr == nil {
			_, werr = f.Write(rec)
		}
		if err := errors.Join(terr, werr, f.Close()); err != nil {
			return fmt.Errorf("record run %s: %w", e.RunID, diskspace.Explain(err, h.dir))
		}
		return nil
	})
}

// endsTorn reports whether f is not empty and does not end with a newline.
func endsTorn(f *os.File) (bool, error) {
	fi, err := f.Stat()
	if err != nil || fi.Size() == 0 {
		return false, err
	}
	var last [1]byte
	if _, err := f.ReadAt(last[:], fi.Size()-1); err != nil {
		return false, err
	}
	return last[0] != '\n', nil
}

// List returns up to limit runs, newest first (limit <= 0: all). Lines that
// do not parse (a torn write) are skipped.
func (h *History) List(limit int) ([]Entry, error) {
	var entries []Entry
	err := h.locked(func() error {
		f, err := os.Open(filepath.Join(h.dir, "runs.jsonl"))
		if errors.Is(err, os.ErrNotExist) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("read run history: %w", err)
		}
		defer f.Close()
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 0, 64<<10), 16<<20)
		for sc.Scan() {
			var e Entry
			if json.Unmarshal(sc.Bytes(), &e) == nil && lease.IsRunID(e.RunID) {
				entries = append(entries, e)
			}
		}
		if err := sc.Err(); err != nil {
			return fmt.Errorf("read run history %s: %w", f.Name(), err)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	slices.Reverse(entries)
	if limit > 0 && len(entries) > limit {
		entries = entries[:limit]
	}
	if entries == nil {
		entries = []Entry{}
	}
	return entries, nil
}

// Log returns the stored output of a run (its last LogLimit bytes), named
// by its RunID or by its CoordinatorRunID. An unknown run is ErrNotFound.
func (h *History) Log(runID string) ([]byte, error) {
	if !lease.IsRunID(runID) {
		return nil, fmt.Errorf("run %q: malformed run ID: want run_ and 12 lowercase hex digits", runID)
	}
	if h.dir == "" {
		return nil, errNoDir
	}
	data, err := os.ReadFile(h.logPath(runID))
	if errors.Is(err, os.ErrNotExist) {
		if local, ok := h.localID(runID); ok {
			data, err = os.ReadFile(h.logPath(local))
		}
	}
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("run %s: no log in the run history: %w", runID, provider.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("read log of run %s: %w", runID, err)
	}
	return data, nil
}

// localID is the RunID of the recorded run whose CoordinatorRunID is
// coordID, when it has another one (a RunID its caller chose, or a run
// recorded before run IDs were the coordinator's).
func (h *History) localID(coordID string) (string, bool) {
	entries, err := h.List(0)
	if err != nil {
		return "", false
	}
	for _, e := range entries {
		if e.CoordinatorRunID == coordID && e.RunID != coordID {
			return e.RunID, true
		}
	}
	return "", false
}

// CreateLog opens a new log for a run, which keeps the last LogLimit bytes
// written to it. Close it when the run is over.
func (h *History) CreateLog(runID string) (*Log, error) {
	if !lease.IsRunID(runID) {
		return nil, fmt.Errorf("log run %q: malformed run ID", runID)
	}
	if h.dir == "" {
		return nil, errNoDir
	}
	if err := os.MkdirAll(filepath.Join(h.dir, "logs"), 0o700); err != nil {
		return nil, fmt.Errorf("log run %s: %w", runID, err)
	}
	f, err := os.OpenFile(h.logPath(runID), os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return nil, fmt.Errorf("log run %s: %w", runID, diskspace.Explain(err, h.dir))
	}
	limit := h.LogLimit
	if limit <= 0 {
		limit = DefaultLogLimit
	}
	return &Log{f: f, limit: limit}, nil
}

// Log is a run's log: a file that keeps the last limit bytes written to
// it. It grows to twice the limit before dropping its front, so trimming is
// amortised. It is safe for concurrent use.
type Log struct {
	mu    gosync.Mutex
	f     *os.File
	size  int64
	limit int64
	err   error
}

func (l *Log) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.err != nil {
		return 0, l.err
	}
	if int64(len(p)) > l.limit {
		if err := l.reset(); err != nil {
			return 0, err
		}
		n := len(p)
		p = p[int64(len(p))-l.limit:]
		if _, err := l.write(p); err != nil {
			return 0, err
		}
		return n, nil
	}
	if n, err := l.write(p); err != nil {
		return n, err
	}
	if l.size > 2*l.limit {
		if err := l.trim(); err != nil {
			return len(p), err
		}
	}
	return len(p), nil
}

func (l *Log) write(p []byte) (int, error) {
	n, err := l.f.WriteAt(p, l.size)
	l.size += int64(n)
	if err != nil {
		err = diskspace.Explain(err, filepath.Dir(l.f.Name()))
		l.err = err
	}
	return n, err
}

func (l *Log) reset() error {
	if err := l.f.Truncate(0); err != nil {
		l.err = err
		return err
	}
	l.size = 0
	return nil
}

// trim keeps only the last limit bytes.
func (l *Log) trim() error {
	if l.size <= l.limit {
		return nil
	}
	tail := make([]byte, l.limit)
	if _, err := l.f.ReadAt(tail, l.size-l.limit); err != nil && err != io.EOF {
		l.err = err
		return err
	}
	if err := l.reset(); err != nil {
		return err
	}
	_, err := l.write(tail)
	return err
}

// Close trims the log to its limit and closes it.
func (l *Log) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	err := l.err
	if err == nil {
		err = l.trim()
	}
	return errors.Join(err, l.f.Close())
}
