package proc

import (
	"strconv"

	"golang.org/x/sys/unix"
)

// startOf is the process's start time as the kernel keeps it.
func startOf(pid int) (string, bool) {
	kp, err := unix.SysctlKinfoProc("kern.proc.pid", pid)
	if err != nil || kp.Proc.P_pid != int32(pid) {
		return "", false
	}
	tv := kp.Proc.P_starttime
	return strconv.FormatInt(int64(tv.Sec), 10) + "." + strconv.FormatInt(int64(tv.Usec), 10), true
}

func zombie(int) bool { return false }
