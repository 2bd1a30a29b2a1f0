package sshmux

import "os"

// socketFile identifies the file at a socket's path, to tell when it was
// removed or replaced.
type socketFile struct{ fi os.FileInfo }

func socketID(path string) (socketFile, error) {
	fi, err := os.Lstat(path)
	return socketFile{fi}, err
}

func (s socketFile) same(o socketFile) bool { return os.SameFile(s.fi, o.fi) }
