package run

import (
	"bytes"
	"io"
	gosync "sync"
)

// maxStatusLine bounds how much of the wrapper's status line is buffered.
const maxStatusLine = 256

// output connects the session's stdout and stderr to the caller's writers.
// It strips the wrapper's status line from stdout and keeps the tail of
// stderr for error messages. When a writer fails, output stops writing to
// it (so it cannot block the session) and signals Run, through failed, to
// stop the command.
type output struct {
	stdout *statusWriter
	stderr *tailWriter

	once   gosync.Once
	failed chan struct{}
	err    error // the first write error; valid once failed is closed
}

func newOutput(stdout, stderr io.Writer, marker string) *output {
	if stdout == nil {
		stdout = io.Discard
	}
	if stderr == nil {
		stderr = io.Discard
	}
	// Like os/exec: when both go to the same writer, one goroutine at a
	// time writes to it.
	if sameWriter(stdout, stderr) {
		l := &lockedWriter{w: stdout}
		stdout, stderr = l, l
	}
	o := &output{failed: make(chan struct{})}
	o.stdout = &statusWriter{w: &guardedWriter{out: o, w: stdout}, marker: []byte(marker + " "), ok: make(chan struct{})}
	o.stderr = &tailWriter{w: &guardedWriter{out: o, w: stderr}}
	return o
}

func sameWriter(a, b io.Writer) (same bool) {
	defer func() {
		if recover() != nil {
			same = false // uncomparable dynamic types
		}
	}()
	return a == b
}

func (o *output) fail(err error) {
	o.once.Do(func() {
		o.err = err
		close(o.failed)
	})
}

// writeErr returns the first error a writer returned, if any.
func (o *output) writeErr() error {
	select {
	case <-o.failed:
		return o.err
	default:
		return nil
	}
}

// guardedWriter writes to w until w fails, then discards.
type guardedWriter struct {
	out    *output
	w      io.Writer
	broken bool
}

func (g *guardedWriter) Write(p []byte) (int, error) {
	if g.broken || len(p) == 0 {
		return len(p), nil
	}
	if _, err := g.w.Write(p); err != nil {
		g.broken = true
		g.out.fail(err)
	}
	return len(p), nil
}

// statusWriter passes stdout through, except for the wrapper's status line
// "<marker> <status>\n". Anything before it (say, from the login shell's rc
// files) is passed through too.
type statusWriter struct {
	w      io.Writer
	marker []byte
	// ok is closed when the status line says "ok": the command is about
	// to start.
	ok chan struct{}

	found   bool
	status  string
	pending []byte
}

func (s *statusWriter) Write(p []byte) (int, error) {
	if s.found {
		s.w.Write(p)
		return len(p), nil
	}
	s.pending = append(s.pending, p...)
	i := bytes.Index(s.pending, s.marker)
	if i < 0 {
		// Keep what could be the start of the marker.
		keep := min(len(s.pending), len(s.marker)-1)
		s.w.Write(s.pending[:len(s.pending)-keep])
		s.pending = append(s.pending[:0], s.pending[len(s.pending)-keep:]...)
		return len(p), nil
	}
	s.w.Write(s.pending[:i])
	s.pending = s.pending[i:]
	line, rest, ok := bytes.Cut(s.pending[len(s.marker):], []byte("\n"))
	if !ok {
		if len(s.pending) > len(s.marker)+maxStatusLine {
			// Not our status line after all.
			s.w.Write(s.pending)
			s.pending = nil
		}
		return len(p), nil
	}
	s.found = true
	s.status = string(line)
	if s.status == statusOK {
		close(s.ok)
	}
	s.w.Write(rest)
	s.pending = nil
	return len(p), nil
}

// Status returns the wrapper's status, or "" when it reported none.
// It must be called after the session has ended.
func (s *statusWriter) Status() string {
	return s.status
}

// tailWriter passes stderr through (when w is set) and remembers its last
// bytes.
type tailWriter struct {
	w    io.Writer
	tail []byte
}

const tailSize = 1024

func (t *tailWriter) Write(p []byte) (int, error) {
	if t.w != nil {
		t.w.Write(p)
	}
	t.tail = append(t.tail, p...)
	if len(t.tail) > tailSize {
		t.tail = append(t.tail[:0], t.tail[len(t.tail)-tailSize:]...)
	}
	return len(p), nil
}

// Tail returns the end of what was written to stderr. It must be called
// after the session has ended.
func (t *tailWriter) Tail() string {
	return string(bytes.TrimSpace(t.tail))
}

type lockedWriter struct {
	mu gosync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// Flush passes on what was held back while looking for the status line.
// It must be called after the session has ended.
func (s *statusWriter) Flush() {
	if !s.found {
		s.w.Write(s.pending)
		s.pending = nil
	}
}
