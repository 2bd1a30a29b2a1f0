//go:build linux || darwin || freebsd

package diskspace

import "golang.org/x/sys/unix"

func free(dir string) (Space, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return Space{}, err
	}
	bsize := uint64(st.Bsize) //nolint:unconvert // int64 on linux, uint32 on darwin
	return Space{Avail: uint64(st.Bavail) * bsize, Total: uint64(st.Blocks) * bsize}, nil
}
