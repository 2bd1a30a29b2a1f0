package main

import (
	"fmt"
	"io"
	"os"
	gosync "sync"
	"time"

	"golang.org/x/term"

	"github.com/crabbox-dev/crabbox/sync"
)

// isTerminal reports whether w is a terminal (progress is shown only there;
// piped output stays quiet).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

// statusLine is one line of progress on a terminal, updated at most ten
// times a second and cleared before anything else is written.
type statusLine struct {
	w     io.Writer
	mu    gosync.Mutex
	last  time.Time
	shown bool
	// now is the clock (time.Now if nil; tests set it).
	now func() time.Time
	// start, startBytes are the time and bytes of the first progress
	// report, from which the rate is measured.
	start      time.Time
	startBytes int64
}

// syncProgress returns the sync progress callback for w: nil unless w is a
// terminal, so that piped output stays quiet.
func (s *statusLine) syncProgress() func(files int, bytes int64) {
	if !isTerminal(s.w) {
		return nil
	}
	return s.update
}

// update shows the files and bytes sent so far and the rate since the
// first report, at most ten times a second.
func (s *statusLine) update(files int, bytes int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	if s.now != nil {
		now = s.now()
	}
	if s.start.IsZero() {
		s.start, s.startBytes = now, bytes
	}
	if !s.last.IsZero() && now.Sub(s.last) < 100*time.Millisecond {
		return
	}
	s.last, s.shown = now, true
	line := fmt.Sprintf("syncing: %d files, %s", files, sync.FormatBytes(bytes))
	if elapsed := now.Sub(s.start); elapsed > 0 {
		rate := float64(bytes-s.startBytes) / elapsed.Seconds()
		line += fmt.Sprintf(", %s/s", sync.FormatBytes(int64(rate)))
	}
	fmt.Fprintf(s.w, "\r\033[K%s", line)
}

// clear erases the status line if it is shown.
func (s *statusLine) clear() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.shown {
		fmt.Fprint(s.w, "\r\033[K")
		s.shown = false
	}
}

// before returns w wrapped so that the status line is cleared before each
// write to it.
func (s *statusLine) before(w io.Writer) io.Writer {
	return writerFunc(func(p []byte) (int, error) {
		s.clear()
		return w.Write(p)
	})
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }
