package crabbox

import (
	"errors"
	"io/fs"
	"strings"
	"syscall"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/crabbox-dev/crabbox/internal/diskspace"
	"github.com/crabbox-dev/crabbox/provider"
)

// TestStateDirChecks: a state directory on a full disk fails as "disk
// full" (creating an empty file there still works; writing does not), and
// the free space check passes, warns when low, and fails when none is left.
func TestStateDirChecks(t *testing.T) {
	const gib = 1 << 30
	full := func(dir string) error {
		return &fs.PathError{Op: "write", Path: dir + "/.doctor-1", Err: syscall.ENOSPC}
	}
	readOnly := func(dir string) error {
		return &fs.PathError{Op: "open", Path: dir + "/.doctor-1", Err: syscall.EROFS}
	}
	ok := func(string) error { return nil }
	space := func(s diskspace.Space) func(string) (diskspace.Space, error) {
		return func(string) (diskspace.Space, error) { return s, nil }
	}
	tests := []struct {
		name  string
		write func(string) error
		free  func(string) (diskspace.Space, error)
		want  []provider.Check
	}{
		{"plenty", ok, space(diskspace.Space{Avail: 50 * gib, Total: 100 * gib}), []provider.Check{
			{Name: "state directory", OK: true, Detail: "/s is writable"},
			{Name: "state directory space", OK: true, Detail: "50.0 GiB free of 100.0 GiB at /s"},
		}},
		{"low", ok, space(diskspace.Space{Avail: gib / 2, Total: 100 * gib}), []provider.Check{
			{Name: "state directory", OK: true, Detail: "/s is writable"},
			{Name: "state directory space", OK: true, Warn: true,
				Detail: "512.0 MiB free of 100.0 GiB at /s (under 1.0 GiB or 5%): syncs and runs may fail with a full disk"},
		}},
		{"full", full, space(diskspace.Space{Avail: 0, Total: 100 * gib}), []provider.Check{
			{Name: "state directory", Detail: "/s: disk full, a test file of 64.0 KiB could not be written: write /s/.doctor-1: no space left on device"},
			{Name: "state directory space", Detail: "disk full: 0 B free of 100.0 GiB at /s"},
		}},
		{"read-only", readOnly, func(string) (diskspace.Space, error) { return diskspace.Space{}, errors.New("statfs: boom") }, []provider.Check{
			{Name: "state directory", Detail: "/s is not writable: open /s/.doctor-1: read-only file system"},
			{Name: "state directory space", OK: true, Warn: true, Detail: "cannot tell: statfs: boom"},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if diff := cmp.Diff(tt.want, stateDirChecks("/s", tt.write, tt.free)); diff != "" {
				t.Errorf("checks (-want +got):\n%s", diff)
			}
		})
	}
}

// The probe writes real bytes and flushes them, so a full disk refuses it.
func TestWriteProbe(t *testing.T) {
	dir := t.TempDir()
	if err := writeProbe(dir); err != nil {
		t.Fatal(err)
	}
	if err := writeProbe(dir + "/missing"); err == nil {
		t.Error("writeProbe in a missing directory succeeded")
	}
}

func TestParseDF(t *testing.T) {
	tests := []struct {
		name, out string
		want      diskspace.Space
		wantErr   string
	}{
		{"linux", "Filesystem     1024-blocks     Used Available Capacity Mounted on\n/dev/sda1        102400000 51200000  46080000      53% /\n",
			diskspace.Space{Avail: 46080000 * 1024, Total: 102400000 * 1024}, ""},
		{"spaces in names", "Filesystem 1024-blocks Used Available Capacity Mounted on\nmy disk 1000 10 990 1% /mnt/my work\n",
			diskspace.Space{Avail: 990 * 1024, Total: 1000 * 1024}, ""},
		{"busybox dash capacity", "Filesystem 1024-blocks Used Available Capacity Mounted on\nnone 0 0 0 - /proc\n",
			diskspace.Space{}, ""},
		{"crlf", "Filesystem 1024-blocks Used Available Capacity Mounted on\r\noverlay 2048 1024 1024 50% /\r\n",
			diskspace.Space{Avail: 1024 * 1024, Total: 2048 * 1024}, ""},
		{"no header", "/dev/sda1 1 1 1 1% /\n", diskspace.Space{}, "unexpected output"},
		{"header only", "Filesystem 1024-blocks Used Available Capacity Mounted on\n", diskspace.Space{}, "unexpected output"},
		{"garbage", "Filesystem\nhello world\n", diskspace.Space{}, "unexpected output"},
		{"huge", "Filesystem x\nfs 99999999999999999999 1 1 1% /\n", diskspace.Space{}, "unexpected sizes"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseDF(tt.out)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("parseDF = %+v, %v; want an error containing %q", got, err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("parseDF (-want +got):\n%s", diff)
			}
		})
	}
}

// FuzzParseDF: df's output comes from the box; whatever it says, parseDF
// returns an error or sizes that fit, never panics.
func FuzzParseDF(f *testing.F) {
	f.Add("Filesystem     1024-blocks     Used Available Capacity Mounted on\n/dev/sda1 100 50 50 50% /\n")
	f.Add("Filesystem\n a 1 2 3 - /x y\n")
	f.Fuzz(func(t *testing.T, out string) {
		s, err := parseDF(out)
		if err != nil {
			if len(err.Error()) > 300 {
				t.Errorf("error of %d bytes", len(err.Error()))
			}
			return
		}
		if s.Avail > 1<<63 || s.Total > 1<<63 {
			t.Errorf("sizes out of range: %+v", s)
		}
	})
}
