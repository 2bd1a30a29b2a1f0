package sshserver

import (
	"os"
	"os/exec"
	"time"

	"golang.org/x/crypto/ssh"
)

// process is a started command and the parent's ends of its stdio.
type process struct {
	cmd    *exec.Cmd
	tty    bool          // stdin and stdout are a pty master
	stdin  *os.File      // write end of stdin, or the pty master
	stdout *os.File      // read end of stdout, or the pty master
	stderr *os.File      // read end of stderr; nil with a pty
	done   chan struct{} // closed once the command has been reaped and its output sent
}

// startWithPipes starts cmd in a new process group with pipes for stdin,
// stdout and stderr.
func startWithPipes(cmd *exec.Cmd) (*process, error) {
	inR, inW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		closeFiles(inR, inW)
		return nil, err
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		closeFiles(inR, inW, outR, outW)
		return nil, err
	}
	cmd.Stdin, cmd.Stdout, cmd.Stderr = inR, outW, errW
	setProcessGroup(cmd)
	err = cmd.Start()
	closeFiles(inR, outW, errW) // the child has its own copies
	if err != nil {
		closeFiles(inW, outR, errR)
		return nil, err
	}
	return &process{cmd: cmd, stdin: inW, stdout: outR, stderr: errR, done: make(chan struct{})}, nil
}

func closeFiles(files ...*os.File) {
	for _, f := range files {
		_ = f.Close()
	}
}

// finished reports whether the command has ended and its output was sent.
func (p *process) finished() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// terminate ends the command's whole process group. Without a terminal
// it first closes the command's stdin, as sshd does when a client goes
// away, and gives it grace to end on its own: a command that watches its
// stdin (crabbox's run wrapper does) then stops what it started in
// sessions of its own, which a signal to this group would never reach.
// Then SIGTERM, then SIGKILL for whatever is left after grace. If output
// is still held open after that, by a process that left the group, it
// stops reading it. It returns once the command has been reaped.
func (p *process) terminate(grace time.Duration) {
	if p.finished() {
		return
	}
	if !p.tty {
		_ = p.stdin.Close()
		if p.waitDone(grace) {
			return
		}
	}
	_ = signalGroup(p.cmd.Process, "TERM")
	p.waitDone(grace)
	// Also for members that ignore SIGTERM or outlived the shell, and for
	// the shell itself should it have left its group.
	_ = signalGroup(p.cmd.Process, "KILL")
	_ = p.cmd.Process.Kill()
	if p.waitDone(grace) {
		return
	}
	closeFiles(p.stdout)
	if p.stderr != nil {
		closeFiles(p.stderr)
	}
	<-p.done
}

// waitDone waits up to d for the command to finish and reports whether it
// did.
func (p *process) waitDone(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-p.done:
		return true
	case <-t.C:
		return false
	}
}

type exitStatusMsg struct {
	Status uint32
}

type exitSignalMsg struct {
	Signal     string
	CoreDumped bool
	Error      string
	Lang       string
}

// exitMessage returns the channel request that reports how a command
// ended, as sshd sends it: "exit-signal" with the signal name without
// "SIG" if a signal killed it, "exit-status" otherwise.
func exitMessage(ps *os.ProcessState) (typ string, payload []byte, ok bool) {
	if ps == nil {
		return "", nil, false
	}
	if name, core, ok := exitSignal(ps); ok {
		return "exit-signal", ssh.Marshal(exitSignalMsg{Signal: name, CoreDumped: core}), true
	}
	return "exit-status", ssh.Marshal(exitStatusMsg{Status: uint32(ps.ExitCode())}), true
}
