//go:build unix

package diskspace

import (
	"errors"

	"golang.org/x/sys/unix"
)

func isFull(err error) bool { return errors.Is(err, unix.ENOSPC) || errors.Is(err, unix.EDQUOT) }
