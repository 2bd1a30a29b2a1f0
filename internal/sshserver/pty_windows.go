package sshserver

import (
	"errors"
	"os"
	"os/exec"
)

// ptySupported is false on Windows: pty-req requests are rejected.
const ptySupported = false

var errNoPty = errors.New("pseudo-terminals are not supported on windows")

func startWithPty(*exec.Cmd, window) (*process, error) { return nil, errNoPty }

func resizePty(*os.File, window) error { return errNoPty }
