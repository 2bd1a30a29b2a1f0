package diskspace

import (
	"errors"
	"io/fs"
	"os"
	"runtime"
	"strings"
	"syscall"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestFree(t *testing.T) {
	s, err := Free(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if s.Total == 0 || s.Avail > s.Total {
		t.Errorf("Free = %+v, want 0 < Avail <= Total", s)
	}
	if _, err := Free("/no/such/dir/crabbox"); err == nil || !strings.Contains(err.Error(), "/no/such/dir/crabbox") {
		t.Errorf("Free of a missing directory: err = %v, want one naming it", err)
	}
}

func TestLow(t *testing.T) {
	const gib = 1 << 30
	for _, tt := range []struct {
		s    Space
		want bool
	}{
		{Space{Avail: 0, Total: 100 * gib}, true},
		{Space{Avail: gib - 1, Total: 2 * gib}, true},
		{Space{Avail: 4 * gib, Total: 100 * gib}, true}, // 4%
		{Space{Avail: 5 * gib, Total: 100 * gib}, false},
		{Space{Avail: 2 * gib, Total: 2 * gib}, false},
		{Space{Avail: 2 * gib, Total: 0}, false},
	} {
		if got := tt.s.Low(); got != tt.want {
			t.Errorf("%+v.Low() = %v, want %v", tt.s, got, tt.want)
		}
	}
}

func TestExplain(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("ENOSPC is unix's; windows reports ERROR_DISK_FULL")
	}
	dir := t.TempDir()
	full := &fs.PathError{Op: "write", Path: dir + "/x", Err: syscall.ENOSPC}
	err := Explain(full, dir)
	if !IsFull(err) || !errors.Is(err, ErrFull) || !errors.Is(err, syscall.ENOSPC) {
		t.Errorf("Explain(ENOSPC) = %v: want it to match ErrFull and ENOSPC", err)
	}
	if msg := err.Error(); !strings.HasPrefix(msg, "disk full at "+dir+" (") || !strings.Contains(msg, " free): write ") {
		t.Errorf("Explain(ENOSPC) says %q", msg)
	}
	if again := Explain(err, dir); again != err {
		t.Errorf("Explain twice = %v, want it unchanged", again)
	}
	other := &fs.PathError{Op: "write", Path: dir + "/x", Err: os.ErrPermission}
	if got := Explain(other, dir); got != error(other) || IsFull(got) {
		t.Errorf("Explain(EPERM) = %v, want it unchanged", got)
	}
	if Explain(nil, dir) != nil || IsFull(nil) {
		t.Error("Explain(nil) or IsFull(nil) is not nil/false")
	}
}
