//go:build windows

package diskspace

import (
	"errors"

	"golang.org/x/sys/windows"
)

func free(dir string) (Space, error) {
	p, err := windows.UTF16PtrFromString(dir)
	if err != nil {
		return Space{}, err
	}
	var avail, total, totalFree uint64
	if err := windows.GetDiskFreeSpaceEx(p, &avail, &total, &totalFree); err != nil {
		return Space{}, err
	}
	return Space{Avail: avail, Total: total}, nil
}

func isFull(err error) bool {
	return errors.Is(err, windows.ERROR_DISK_FULL) || errors.Is(err, windows.ERROR_HANDLE_DISK_FULL)
}
