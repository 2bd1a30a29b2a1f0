//go:build !unix

package sshd

import "syscall"

func ownProcessGroup() *syscall.SysProcAttr { return nil }
