package sync

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/crypto/ssh"

	"github.com/crabbox-dev/crabbox/lease"
	"github.com/crabbox-dev/crabbox/provider"
	"github.com/crabbox-dev/crabbox/provider/providertest"
)

// The box's copy is checked, not assumed: a workdir deleted or replaced
// on the box since the last push has lost the marker that names the
// manifest beside it, and the next push sends the whole tree, saying so
// once, whether or not the checkout changed.

// warnings collects what a push says through Options.Warn.
type warnings []string

func (w *warnings) warn(s string) { *w = append(*w, s) }

// wantStrayWarning checks that the push said, once, that it sends the
// whole tree of remoteDir again.
func wantStrayWarning(t *testing.T, got warnings, remoteDir string) {
	t.Helper()
	want := remoteDir + " is not the copy crabbox synced (deleted or replaced since): sending the whole tree again"
	if diff := cmp.Diff(warnings{want}, got); diff != "" {
		t.Errorf("warnings (-want +got):\n%s", diff)
	}
}

// markerOn returns what the box's marker in remoteDir holds.
func markerOn(t *testing.T, remoteDir string) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(remoteDir, Marker))
	if err != nil {
		t.Fatalf("marker on the box: %v", err)
	}
	return string(data)
}

// checkHolds runs p's UnchangedCheck on the box and reports whether it
// held.
func checkHolds(t *testing.T, client *ssh.Client, p *Prepared) bool {
	t.Helper()
	check, ok := p.UnchangedCheck()
	if !ok {
		t.Fatal("no UnchangedCheck for a listing the cache saw synced")
	}
	sess, err := client.NewSession()
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close()
	sess.Stdin = strings.NewReader(check)
	return sess.Run("sh -s") == nil
}

func TestPushWorkdirDeleted(t *testing.T) {
	client := dial(t)
	for _, edit := range []bool{true, false} {
		name := "unchanged"
		if edit {
			name = "one file edited"
		}
		t.Run(name, func(t *testing.T) {
			root := plainTree(t, 20, "v1")
			remoteDir := filepath.Join(t.TempDir(), "repo")
			var said warnings
			opts := Options{Root: root, RemoteDir: remoteDir, CacheFile: filepath.Join(t.TempDir(), "hashes"), Warn: said.warn}
			first := push(t, client, opts)
			if got, want := markerOn(t, remoteDir), fingerprint(remoteManifest(t, remoteDir))+"\n"; got != want {
				t.Errorf("marker after a push = %q, want the manifest's fingerprint %q", got, want)
			}
			if len(said) != 0 {
				t.Errorf("first push warned %q", said)
			}

			if err := os.RemoveAll(remoteDir); err != nil {
				t.Fatal(err)
			}
			if edit {
				write(t, root, "d3/f003.txt", "v2 file 3\n", 0o644)
			} else {
				// The precondition a warm run folds into its command
				// fails, so that the run pushes first.
				p, err := Prepare(t.Context(), opts)
				if err != nil {
					t.Fatal(err)
				}
				if checkHolds(t, client, p) {
					t.Error("UnchangedCheck holds on a box whose workdir was deleted")
				}
			}
			st := push(t, client, opts)
			if st.Skipped || st.Sent != first.Sent || st.Deleted != 0 {
				t.Errorf("push after the workdir was deleted: %+v, want all %d files sent", st, first.Sent)
			}
			sameTree(t, root, remoteDir)
			wantStrayWarning(t, said, remoteDir)

			// The box is whole again: the next push skips, quietly.
			said = nil
			if st := push(t, client, opts); !st.Skipped {
				t.Errorf("push after the repair: %+v, want skipped", st)
			}
			if len(said) != 0 {
				t.Errorf("push after the repair warned %q", said)
			}
		})
	}
}

func TestPushWorkdirReplaced(t *testing.T) {
	client := dial(t)
	for _, tt := range []struct {
		name string
		// replace fills dir, the box's replacement of the workdir.
		replace func(t *testing.T, dir string)
		// kept are paths of the replacement that are not crabbox's and
		// stay.
		kept []string
	}{
		{"by a plain directory", func(t *testing.T, dir string) {
			for i := range 20 { // plainTree's paths, another content
				write(t, dir, fmt.Sprintf("d%d/f%03d.txt", i%7, i), "someone else's\n", 0o644)
			}
			write(t, dir, "gone.txt", "someone else's\n", 0o644)
		}, []string{"gone.txt"}},
		{"by another checkout's copy, marker and all", func(t *testing.T, dir string) {
			other := plainTree(t, 25, "other")
			write(t, other, "gone.txt", "the other checkout's\n", 0o644)
			push(t, client, Options{Root: other, RemoteDir: dir})
		}, []string{"d3/f024.txt", "d1/f022.txt", "d2/f023.txt", "d0/f021.txt", "d6/f020.txt", "gone.txt"}},
		{"by an empty directory", func(t *testing.T, dir string) {
			if err := os.MkdirAll(dir, 0o755); err != nil {
				t.Fatal(err)
			}
		}, nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			root := plainTree(t, 20, "v1")
			write(t, root, "gone.txt", "mine\n", 0o644)
			base := t.TempDir()
			remoteDir := filepath.Join(base, "repo")
			var said warnings
			opts := Options{Root: root, RemoteDir: remoteDir, CacheFile: filepath.Join(t.TempDir(), "hashes"), Warn: said.warn}
			push(t, client, opts)
			// gone.txt leaves the file set: a push into the workdir it
			// was synced into deletes it, one into a replacement does not.
			if err := os.Remove(filepath.Join(root, "gone.txt")); err != nil {
				t.Fatal(err)
			}

			replacement := filepath.Join(t.TempDir(), "replacement")
			tt.replace(t, replacement)
			if err := os.RemoveAll(remoteDir); err != nil {
				t.Fatal(err)
			}
			if err := os.Rename(replacement, remoteDir); err != nil {
				t.Fatal(err)
			}
			st := push(t, client, opts)
			if st.Skipped || st.Sent != 21 || st.Deleted != 0 {
				t.Errorf("push into the replaced workdir: %+v, want all 21 files sent, nothing deleted", st)
			}
			sameTree(t, root, remoteDir, tt.kept...)
			wantStrayWarning(t, said, remoteDir)
		})
	}
}

// A push cut short in the workdir leaves an empty marker: the next push
// trusts what the pending file allows, as before, without a word; once
// the workdir is deleted as well, it trusts nothing.
func TestPushWorkdirAfterInterruptedPush(t *testing.T) {
	client := dial(t)
	root := plainTree(t, 5, "v1")
	remoteDir := filepath.Join(t.TempDir(), "repo")
	var said warnings
	opts := Options{Root: root, RemoteDir: remoteDir, Warn: said.warn}
	push(t, client, opts)

	interrupt := func() {
		t.Helper()
		write(t, remoteDir, "d1/f001.txt", "half-sent", 0o644)
		write(t, StateDir(remoteDir), pendingFile, string(encodeChanges([]string{"d1/f001.txt"})), 0o644)
		write(t, StateDir(remoteDir), fingerprintFile, "", 0o644)
		write(t, remoteDir, Marker, "", 0o644)
	}
	interrupt()
	if st := push(t, client, opts); st.Skipped || st.Sent != 1 {
		t.Errorf("push after an interrupted one: %+v, want the 1 pending file sent", st)
	}
	sameTree(t, root, remoteDir)
	if len(said) != 0 {
		t.Errorf("push after an interrupted one warned %q", said)
	}

	interrupt()
	if err := os.RemoveAll(remoteDir); err != nil {
		t.Fatal(err)
	}
	if st := push(t, client, opts); st.Skipped || st.Sent != 6 {
		t.Errorf("push after an interrupted one and the workdir deleted: %+v, want all 6 sent", st)
	}
	sameTree(t, root, remoteDir)
	wantStrayWarning(t, said, remoteDir)
}

// The marker is the box's: a command that makes it a symlink does not
// make the next push write through it.
func TestPushMarkerSymlink(t *testing.T) {
	client := dial(t)
	root := plainTree(t, 3, "v1")
	base := t.TempDir()
	remoteDir := filepath.Join(base, "repo")
	opts := Options{Root: root, RemoteDir: remoteDir}
	push(t, client, opts)
	write(t, base, "victim", "precious", 0o644)
	if err := os.Remove(filepath.Join(remoteDir, Marker)); err != nil {
		t.Fatal(err)
	}
	symlink(t, remoteDir, Marker, "../victim")
	write(t, root, "d0/f000.txt", "v2", 0o644)
	push(t, client, opts)
	sameTree(t, root, remoteDir)
	if data, err := os.ReadFile(filepath.Join(base, "victim")); err != nil || string(data) != "precious" {
		t.Errorf("file the marker linked to = %q, %v; want it untouched", data, err)
	}
	if fi, err := os.Lstat(filepath.Join(remoteDir, Marker)); err != nil || !fi.Mode().IsRegular() {
		t.Errorf("marker after the push: %v, %v; want a regular file", fi, err)
	}
}

// A checkout may not hold the marker's name at its top: the push is
// refused before anything moves, naming it.
func TestPrepareRefusesMarker(t *testing.T) {
	for _, p := range []string{Marker, Marker + "/inside"} {
		root := plainTree(t, 2, "v1")
		write(t, root, p, "x", 0o644)
		write(t, root, Marker+".bak", "fine", 0o644)
		write(t, root, "sub/"+Marker, "fine", 0o644)
		_, err := Prepare(t.Context(), Options{Root: root})
		if err == nil || !strings.Contains(err.Error(), `"`+p+`" is where crabbox marks the copy`) {
			t.Errorf("Prepare of a checkout holding %s = %v, want it refused", p, err)
		}
	}
	root := plainTree(t, 2, "v1")
	write(t, root, Marker+".bak", "fine", 0o644)
	write(t, root, "sub/"+Marker, "fine", 0o644)
	if _, err := Prepare(t.Context(), Options{Root: root}); err != nil {
		t.Errorf("Prepare of names that are not the marker: %v", err)
	}
}

// A write that fails on the box because its disk is full is reported as a
// full disk, though dash says only "echo: echo: I/O error"; a write that
// fails with room to spare keeps the shell's words, without the place in
// crabbox's script. The box's tar stand-in extracts, then leaves the
// marker a link to /dev/full, whose writes fail with ENOSPC; the df
// stand-in reports the free space.
func TestPushWriteFailsOnTheBox(t *testing.T) {
	client := dial(t)
	for _, tt := range []struct {
		name string
		free string // df's Available, in KiB
		want string
	}{
		{"disk full", "0", `: the box's disk is full (0 B free in %s); make room there and sync again`},
		{"room to spare", "10485760", `: on the box: Process exited with status 1: echo: I/O error`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			root := plainTree(t, 3, "v1")
			remoteDir := filepath.Join(t.TempDir(), "repo")
			bin := t.TempDir()
			tar, df := filepath.Join(bin, "tar"), filepath.Join(bin, "df")
			write(t, bin, "tar", "#!/bin/sh\ntar \"$@\" || exit\nln -sf /dev/full '"+filepath.Join(remoteDir, Marker)+"'\n", 0o755)
			write(t, bin, "df", "#!/bin/sh\necho 'Filesystem 1024-blocks Used Available Capacity Mounted on'\necho \"box 64 64 "+tt.free+" 100% /\"\n", 0o755)
			_, err := Push(t.Context(), client, Options{Root: root, RemoteDir: remoteDir, tar: tar, df: df})
			want := strings.ReplaceAll(tt.want, "%s", remoteDir)
			if err == nil || !strings.HasSuffix(err.Error(), want) {
				t.Fatalf("push whose marker write fails = %q, want it to end %q", err, want)
			}
			if strings.Contains(err.Error(), "crabbox-sync:") {
				t.Errorf("error %q names the place in crabbox's script", err)
			}
			// The next push repairs the box.
			push(t, client, Options{Root: root, RemoteDir: remoteDir})
			sameTree(t, root, remoteDir)
		})
	}
}

// A lock that cannot be made, with no lock there (another push's), ends
// the push with mkdir's reason at once instead of waiting for a holder.
func TestPushLockCannotBeMade(t *testing.T) {
	client := dial(t)
	root := plainTree(t, 3, "v1")
	remoteDir := filepath.Join(t.TempDir(), "repo")
	symlink(t, StateDir(remoteDir), "lock", "nowhere")
	_, err := pushWithin(t, client, Options{Root: root, RemoteDir: remoteDir})
	if err == nil || !strings.Contains(err.Error(), "cannot create directory") || !strings.Contains(err.Error(), "/lock") {
		t.Fatalf("push whose lock cannot be made = %v, want mkdir's reason", err)
	}
	if _, err := os.Lstat(filepath.Join(remoteDir, "d0")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("push without the lock changed the tree: %v", err)
	}
}

func TestBoxMessage(t *testing.T) {
	for _, tt := range []struct{ stderr, want string }{
		{"crabbox-sync: 47: echo: echo: I/O error\n", "echo: I/O error\n"},
		{"crabbox-sync: line 12: /x/y: Permission denied\n", "/x/y: Permission denied\n"},
		{"sh: 3: cannot create ./x: Is a directory\n", "cannot create ./x: Is a directory\n"},
		{"mkdir: cannot create directory '/a': File exists\ncrabbox-sync free 10 /a\n", "mkdir: cannot create directory '/a': File exists\n"},
		{"tar: a: Cannot open: Permission denied\n", "tar: a: Cannot open: Permission denied\n"},
		{"crabbox-sync: no place here\n", "crabbox-sync: no place here\n"},
	} {
		if got := boxMessage(tt.stderr); got != tt.want {
			t.Errorf("boxMessage(%q) = %q, want %q", tt.stderr, got, tt.want)
		}
	}
}

// The error of a push whose box's disk filled up, as the box's scripts
// report it: what the user reads names the full disk.
func TestBoxErrorDiskFull(t *testing.T) {
	for _, tt := range []struct{ stderr, want string }{
		{"crabbox-sync: 47: echo: echo: I/O error\ncrabbox-sync free 0 /srv/.crabbox/repo\n",
			"the box's disk is full (0 B free in /srv/.crabbox/repo); make room there and sync again"},
		{"mkdir: cannot create directory '/srv/.crabbox/repo/lock': No space left on device\n",
			"the box's disk is full (no space left on device for /srv/repo); make room there and sync again"},
		{"crabbox-sync: 47: echo: echo: I/O error\ncrabbox-sync free 52428800 /srv/.crabbox/repo\n",
			"on the box: exit 1: echo: I/O error"},
	} {
		s := &session{opts: Options{RemoteDir: "/srv/repo"}, stderr: &tail{b: []byte(tt.stderr)}}
		if got := s.boxError(errors.New("exit 1")).Error(); got != tt.want {
			t.Errorf("boxError with stderr %q = %q, want %q", tt.stderr, got, tt.want)
		}
	}
}

// A delegated sandbox whose tar runs out of space is reported as a full
// disk too, naming where.
func TestPushArchiveDiskFull(t *testing.T) {
	sb := providertest.NewSandbox("sandbox", t.TempDir())
	view, err := sb.Warmup(t.Context(), provider.WarmupRequest{LeaseID: lease.NewID()})
	if err != nil {
		t.Fatal(err)
	}
	bin := t.TempDir()
	tar := filepath.Join(bin, "tar")
	write(t, bin, "tar", "#!/bin/sh\ncat >/dev/null\necho 'tar: a: Cannot write: No space left on device' >&2\nexit 2\n", 0o755)
	dir := view.WorkRoot + "/repo"
	p, err := Prepare(t.Context(), Options{Root: plainTree(t, 3, "v1"), RemoteDir: dir, tar: tar})
	if err != nil {
		t.Fatal(err)
	}
	_, err = p.PushArchive(t.Context(), sb, view.ID)
	want := "the sandbox's disk is full ("
	if err == nil || !strings.Contains(err.Error(), want) || !strings.HasSuffix(err.Error(), " free in "+dir+"); make room there and sync again") {
		t.Errorf("PushArchive into a full sandbox = %v, want %q... free in %s", err, want, dir)
	}
}
