package sshserver

import (
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"

	"golang.org/x/crypto/ssh"
)

// exitStatusFailed is reported when the command could not be started at
// all (for example because Config.Dir was removed), after the reason has
// been written to stderr.
const exitStatusFailed = 127

// session is one "session" channel: the requests that prepare it, and the
// one command (or shell) it runs.
//
// All fields are owned by the goroutine running serveSession; the command's
// own goroutines only use the process they were started for.
type session struct {
	srv *Server
	ch  ssh.Channel
	log *slog.Logger

	env     []string    // NAME=value pairs from env requests
	pty     *ptyRequest // nil unless a pty was requested
	started bool        // exec or shell was accepted
	proc    *process    // nil until the command has started
	wg      sync.WaitGroup
}

// ptyRequest is what a pty-req asked for.
type ptyRequest struct {
	term string
	size window
}

// window is a terminal size in characters and pixels, as in pty-req and
// window-change requests.
type window struct {
	Columns, Rows, Width, Height uint32
}

// serveSession answers the requests of one session channel until the
// client closes it or the connection ends. If the command is still running
// then, its process group is terminated.
func (s *Server) serveSession(ch ssh.Channel, reqs <-chan *ssh.Request, log *slog.Logger) {
	sess := &session{srv: s, ch: ch, log: log}
	for req := range reqs {
		ok, start := sess.handle(req)
		if req.WantReply {
			_ = req.Reply(ok, nil)
		}
		// Start only after the reply, so that a client waiting for it
		// never sees the command's output or exit status first.
		if start != nil {
			start()
		}
	}
	if sess.proc != nil {
		sess.proc.terminate(s.killGrace)
	}
	sess.wg.Wait()
	_ = ch.Close()
}

// handle applies one channel request and reports whether it was accepted.
// For exec and shell it also returns the function that starts the command.
func (s *session) handle(req *ssh.Request) (ok bool, start func()) {
	switch req.Type {
	case "env":
		return s.setenv(req.Payload), nil
	case "pty-req":
		return s.requestPty(req.Payload), nil
	case "window-change":
		return s.changeWindow(req.Payload), nil
	case "exec":
		var msg struct{ Command string }
		if s.started || ssh.Unmarshal(req.Payload, &msg) != nil {
			return false, nil
		}
		s.started = true
		return true, func() { s.start("exec", "-c", msg.Command) }
	case "shell":
		if s.started {
			return false, nil
		}
		s.started = true
		return true, func() { s.start("shell") }
	case "signal":
		return s.signal(req.Payload), nil
	default:
		// subsystem, x11-req, auth-agent-req@openssh.com, keepalives...
		s.log.Debug("rejected session request", "type", req.Type)
		return false, nil
	}
}

func (s *session) setenv(payload []byte) bool {
	var msg struct{ Name, Value string }
	if s.started || ssh.Unmarshal(payload, &msg) != nil {
		return false
	}
	if msg.Name == "" || strings.ContainsAny(msg.Name, "=\x00") || strings.ContainsRune(msg.Value, 0) {
		return false
	}
	s.env = append(s.env, msg.Name+"="+msg.Value)
	return true
}

func (s *session) requestPty(payload []byte) bool {
	var msg struct {
		Term                         string
		Columns, Rows, Width, Height uint32
		Modes                        string // not applied: the pty keeps the system's default modes
	}
	if !ptySupported || s.started || ssh.Unmarshal(payload, &msg) != nil {
		return false
	}
	s.pty = &ptyRequest{term: msg.Term, size: window{msg.Columns, msg.Rows, msg.Width, msg.Height}}
	return true
}

func (s *session) changeWindow(payload []byte) bool {
	var size window
	if s.pty == nil || ssh.Unmarshal(payload, &size) != nil {
		return false
	}
	s.pty.size = size
	if s.proc == nil {
		return true // applied when the command starts
	}
	if err := resizePty(s.proc.stdout, size); err != nil {
		s.log.Debug("resize pty", "err", err)
		return false
	}
	return true
}

// signal delivers a signal request (a name without "SIG", like "INT") to
// the command's process group.
func (s *session) signal(payload []byte) bool {
	var msg struct{ Signal string }
	if s.proc == nil || s.proc.finished() || ssh.Unmarshal(payload, &msg) != nil {
		return false
	}
	if err := signalGroup(s.proc.cmd.Process, msg.Signal); err != nil {
		s.log.Debug("signal", "signal", msg.Signal, "err", err)
		return false
	}
	return true
}

// environ is the command's environment: the base environment, TERM for a
// pty, then the client's env requests (later entries win).
func (s *session) environ() []string {
	env := s.srv.cfg.Env
	if env == nil {
		env = os.Environ()
	}
	env = slices.Clone(env)
	if s.pty != nil && s.pty.term != "" {
		env = append(env, "TERM="+s.pty.term)
	}
	return append(env, s.env...)
}

// start runs Shell with args in Config.Dir and streams it over the channel.
// If it cannot start, the reason goes to stderr and the session ends with
// exit status 127.
func (s *session) start(kind string, args ...string) {
	cfg := &s.srv.cfg
	if cfg.OnActivity != nil {
		cfg.OnActivity()
	}
	// The command line is not logged: it may hold secrets.
	s.log.Debug("session started", "kind", kind)
	cmd := exec.Command(cfg.Shell, args...)
	cmd.Dir = cfg.Dir
	cmd.Env = s.environ()

	var (
		p   *process
		err error
	)
	if s.pty != nil {
		p, err = startWithPty(cmd, s.pty.size)
	} else {
		p, err = startWithPipes(cmd)
	}
	if err != nil {
		s.log.Warn("start command", "kind", kind, "err", err)
		_, _ = fmt.Fprintf(s.ch.Stderr(), "crabbox: %v\n", err)
		_, _ = s.ch.SendRequest("exit-status", false, ssh.Marshal(exitStatusMsg{Status: exitStatusFailed}))
		_ = s.ch.Close()
		return
	}
	s.log.Debug("command started", "kind", kind, "pid", cmd.Process.Pid, "pty", p.tty)
	s.proc = p
	s.wg.Go(func() { s.copyInput(p) })
	s.wg.Go(func() { s.run(p) })
}

// run waits for the command and all of its output, then reports how it
// ended and closes the channel.
func (s *session) run(p *process) {
	defer close(p.done)

	var output sync.WaitGroup
	output.Go(func() { copyOutput(s.ch, p.stdout) })
	if p.stderr != nil {
		output.Go(func() { copyOutput(s.ch.Stderr(), p.stderr) })
	}
	waitErr := p.cmd.Wait()
	// Output ends when every process holding the pipes (or the terminal)
	// is gone, not just the shell; sshd waits for it too.
	output.Wait()
	_ = p.stdin.Close()

	_ = s.ch.CloseWrite()
	if typ, payload, ok := exitMessage(p.cmd.ProcessState); ok {
		_, _ = s.ch.SendRequest(typ, false, payload)
	} else {
		s.log.Warn("wait for command", "err", waitErr)
	}
	_ = s.ch.Close()
	s.log.Debug("command ended", "pid", p.cmd.Process.Pid, "state", p.cmd.ProcessState.String())
}

// copyInput copies the channel to the command's stdin. On EOF from the
// client it closes stdin (with a pty, EOF is ignored as sshd does). If the
// command stops reading, the rest of the input is discarded so that the
// client is never blocked.
func (s *session) copyInput(p *process) {
	if _, err := io.Copy(p.stdin, s.ch); err != nil {
		_, _ = io.Copy(io.Discard, s.ch)
		return
	}
	if !p.tty {
		_ = p.stdin.Close()
	}
}

// copyOutput copies src to dst until src ends (EOF, or EIO from a pty
// whose terminal side is closed) or dst fails, and then closes src.
func copyOutput(dst io.Writer, src *os.File) {
	_, _ = io.Copy(dst, src)
	_ = src.Close()
}
