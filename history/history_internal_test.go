package history

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"

	"github.com/crabbox-dev/crabbox/internal/diskspace"
	"github.com/crabbox-dev/crabbox/provider"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestRunLogKeepsLastBytes(t *testing.T) {
	h := Open(t.TempDir())
	h.LogLimit = 10
	l, err := h.CreateLog("run_0123456789ab")
	if err != nil {
		t.Fatal(err)
	}
	var all bytes.Buffer
	for _, chunk := range []string{"abc", "defghij", "klmnopqrstu", "v", "wxyz0123", "45", "6789"} {
		all.WriteString(chunk)
		if n, err := l.Write([]byte(chunk)); err != nil || n != len(chunk) {
			t.Fatalf("Write(%q) = %d, %v", chunk, n, err)
		}
		if l.size > 2*l.limit {
			t.Fatalf("log grew to %d bytes, limit %d", l.size, l.limit)
		}
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	got, err := h.Log("run_0123456789ab")
	if err != nil {
		t.Fatal(err)
	}
	if want := all.Bytes()[all.Len()-10:]; !bytes.Equal(got, want) {
		t.Errorf("log = %q, want the last 10 bytes %q", got, want)
	}
	if fi, err := os.Stat(h.logPath("run_0123456789ab")); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("log file mode = %v (%v), want 0600", fi.Mode(), err)
	}
}

func TestAppendAfterTornLine(t *testing.T) {
	h := Open(t.TempDir())
	first := Entry{RunID: "run_000000000001", Command: "true"}
	if err := h.Append(first); err != nil {
		t.Fatal(err)
	}
	// A crash in the middle of the next append leaves half a line behind.
	f, err := os.OpenFile(filepath.Join(h.dir, "runs.jsonl"), os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString(`{"runId":"run_000000000002","comm`); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	third := Entry{RunID: "run_000000000003", Command: "make test", ExitCode: 2}
	if err := h.Append(third); err != nil {
		t.Fatal(err)
	}
	got, err := h.List(0)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]Entry{third, first}, got); diff != "" {
		t.Errorf("List after a torn line (-want +got):\n%s", diff)
	}
}

// A run's log on a full disk says so: the write's error is "disk full".
// /dev/full answers every write with ENOSPC.
func TestRunLogFullDisk(t *testing.T) {
	f, err := os.OpenFile("/dev/full", os.O_RDWR, 0)
	if err != nil {
		t.Skipf("no /dev/full here: %v", err)
	}
	l := &Log{f: f, limit: DefaultLogLimit}
	defer l.Close()
	_, err = l.Write([]byte("output\n"))
	if err == nil || !strings.HasPrefix(err.Error(), "disk full at /dev") || !errors.Is(err, diskspace.ErrFull) {
		t.Fatalf("Write on a full disk: err = %v, want one beginning disk full at /dev", err)
	}
	if _, again := l.Write([]byte("more\n")); !errors.Is(again, diskspace.ErrFull) {
		t.Errorf("second Write: err = %v, want the same disk full", again)
	}
}

// A run whose local ID differs from its coordinator run ID (chosen by its
// caller, or recorded before the IDs were one) is found by either.
func TestLogByEitherRunID(t *testing.T) {
	h := Open(t.TempDir())
	const local, coord, other = "run_00000000000a", "run_00000000000b", "run_00000000000c"
	l, err := h.CreateLog(local)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.Write([]byte("output\n")); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if err := h.Append(Entry{RunID: local, CoordinatorRunID: coord, Command: "true"}); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{local, coord} {
		if got, err := h.Log(id); err != nil || string(got) != "output\n" {
			t.Errorf("Log(%s) = %q, %v; want the run's output", id, got, err)
		}
	}
	if _, err := h.Log(other); !errors.Is(err, provider.ErrNotFound) || !strings.Contains(err.Error(), other) {
		t.Errorf("Log(%s) error %v, want ErrNotFound naming it", other, err)
	}
}
