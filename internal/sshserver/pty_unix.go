//go:build unix

package sshserver

import (
	"os"
	"os/exec"
	"runtime"
	"syscall"

	"github.com/creack/pty"
	"golang.org/x/sys/unix"
)

const ptySupported = true

// startWithPty starts cmd on a new pseudo-terminal of the given size, as
// the leader of a new session (and so of a new process group) with the
// terminal as its controlling terminal. stdin, stdout and stderr all go
// through the terminal, as with sshd.
func startWithPty(cmd *exec.Cmd, size window) (*process, error) {
	master, tty, err := pty.Open()
	if err != nil {
		return nil, err
	}
	defer tty.Close() // the child has its own copy
	if master, err = pollable(master); err != nil {
		return nil, err
	}
	if err := resizePty(master, size); err != nil {
		_ = master.Close()
		return nil, err
	}
	cmd.Stdin, cmd.Stdout, cmd.Stderr = tty, tty, tty
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
	if err := cmd.Start(); err != nil {
		_ = master.Close()
		return nil, err
	}
	return &process{cmd: cmd, tty: true, stdin: master, stdout: master, done: make(chan struct{})}, nil
}

// pollable replaces the blocking pty master that creack/pty returns with a
// non-blocking one managed by the runtime poller, so that Close interrupts
// a Read or Write in progress. Only on Linux: kqueue does not work with pty
// masters on macOS (golang/go#22099), where the master stays blocking.
func pollable(master *os.File) (*os.File, error) {
	if runtime.GOOS != "linux" {
		return master, nil
	}
	defer master.Close()
	fd, err := unix.FcntlInt(master.Fd(), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	if err := unix.SetNonblock(fd, true); err != nil {
		_ = unix.Close(fd)
		return nil, err
	}
	return os.NewFile(uintptr(fd), master.Name()), nil
}

// resizePty sets the terminal size of a pty master. It goes through
// SyscallConn rather than Fd, which would make the file blocking again.
func resizePty(master *os.File, size window) error {
	rc, err := master.SyscallConn()
	if err != nil {
		return err
	}
	ws := &unix.Winsize{
		Row:    clamp16(size.Rows),
		Col:    clamp16(size.Columns),
		Xpixel: clamp16(size.Width),
		Ypixel: clamp16(size.Height),
	}
	var ioctlErr error
	if err := rc.Control(func(fd uintptr) {
		ioctlErr = unix.IoctlSetWinsize(int(fd), unix.TIOCSWINSZ, ws)
	}); err != nil {
		return err
	}
	return ioctlErr
}

func clamp16(v uint32) uint16 {
	return uint16(min(v, 0xffff))
}
