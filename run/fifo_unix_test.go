//go:build unix

package run_test

import (
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

func makeFIFO(t *testing.T) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "fifo")
	if err := unix.Mkfifo(p, 0o600); err != nil {
		t.Fatalf("mkfifo: %v", err)
	}
	return p
}
