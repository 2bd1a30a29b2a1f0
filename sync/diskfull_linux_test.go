package sync

import (
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// tinyDisk mounts a 256 KiB tmpfs for the test and returns its directory.
// It needs root (mount); the test is skipped where it cannot mount.
func tinyDisk(t *testing.T) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("mounting a tmpfs needs root")
	}
	dir := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=256k,mode=0755", "crabbox-test", dir).CombinedOutput(); err != nil {
		t.Skipf("mount a tmpfs: %v: %s", err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", dir).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v: %s", dir, err, out)
		}
	})
	return dir
}

// fill writes a file into dir until its file system is full.
func fill(t *testing.T, dir string) string {
	t.Helper()
	name := filepath.Join(dir, "filler")
	f, err := os.Create(name)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 4096)
	for {
		if _, err := f.Write(buf); err != nil {
			return name
		}
	}
}

// A box whose disk is really full: the push says so (dash says only "echo:
// I/O error" when the lock's owner cannot be written), leaves no lock for
// the next push to wait on, and the push after room is made repairs the
// box.
func TestPushIntoFullDisk(t *testing.T) {
	client := dial(t)
	disk := tinyDisk(t)
	root := plainTree(t, 5, "v1")
	remoteDir := filepath.Join(disk, "repo")
	push(t, client, Options{Root: root, RemoteDir: remoteDir})
	filler := fill(t, disk)
	write(t, root, "d0/f000.txt", "v2, longer than before\n", 0o644)

	_, err := pushWithin(t, client, Options{Root: root, RemoteDir: remoteDir})
	if err == nil || !strings.Contains(err.Error(), ": the box's disk is full (0 B free in "+disk) || !strings.HasSuffix(err.Error(), "); make room there and sync again") {
		t.Fatalf("push into a full disk = %v, want the box's disk is full (0 B free in %s...)", err, disk)
	}
	if _, err := os.Lstat(filepath.Join(StateDir(remoteDir), "lock")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("lock after the failed push: %v, want none", err)
	}
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	if _, err := pushWithin(t, client, Options{Root: root, RemoteDir: remoteDir}); err != nil {
		t.Fatalf("push once there is room: %v", err)
	}
	sameTree(t, root, remoteDir)
}
