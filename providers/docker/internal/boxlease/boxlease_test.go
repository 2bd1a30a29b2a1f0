package boxlease

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"

	"github.com/crabbox-dev/crabbox/internal/testfs"
	"github.com/crabbox-dev/crabbox/lease"
	"github.com/crabbox-dev/crabbox/providers/local"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func payload(t *testing.T) Payload {
	t.Helper()
	priv, pub, err := local.NewHostKey()
	if err != nil {
		t.Fatal(err)
	}
	_, user, err := local.NewHostKey()
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC()
	rec, err := local.EncodeRecord(local.AgentLease{ID: lease.NewID(), CreatedAt: now, ExpiresAt: now.Add(time.Hour), User: "root", HostKey: pub, AuthorizedKey: user})
	if err != nil {
		t.Fatal(err)
	}
	return Payload{Record: rec, HostKey: priv}
}

// What the provider writes, the agent reads and installs as the lease
// directory it serves, without waiting for the end of its input.
func TestWriteReadInstall(t *testing.T) {
	p := payload(t)
	root := t.TempDir()
	p.WorkRoot = filepath.Join(root, "work", "crabbox")
	var buf bytes.Buffer
	if err := Write(&buf, p); err != nil {
		t.Fatal(err)
	}
	buf.WriteString("more that is not read")
	got, err := Read(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(p, got); diff != "" {
		t.Fatalf("Read (-wrote +read):\n%s", diff)
	}
	dir := filepath.Join(root, "crabbox", "cbx_000000000000")
	if err := got.Install(dir); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		local.HostKeyFile: string(p.HostKey),
		local.RecordFile:  string(p.Record),
	}
	if diff := cmp.Diff(want, testfs.Files(t, dir)); diff != "" {
		t.Errorf("lease directory (-want +got):\n%s", diff)
	}
	for name, mode := range map[string]os.FileMode{"": 0o700 | os.ModeDir, local.WorkDir: 0o700 | os.ModeDir, local.HostKeyFile: 0o600, local.RecordFile: 0o600} {
		if fi, err := os.Stat(filepath.Join(dir, name)); err != nil || fi.Mode() != mode {
			t.Errorf("%s: mode %v (%v), want %v", filepath.Join(dir, name), fi.Mode(), err, mode)
		}
	}
	if fi, err := os.Stat(p.WorkRoot); err != nil || !fi.IsDir() {
		t.Errorf("work root %s: %v", p.WorkRoot, err)
	}
	if err := got.Install(dir); err == nil {
		t.Errorf("a second Install into %s succeeded, want an error", dir)
	}
}

// A box made from a checkpoint image finds the lease directories of the
// box the image was saved from, and for a restore its own: Install
// replaces them all, and leaves everything else beside them.
func TestInstallFromCheckpoint(t *testing.T) {
	root := t.TempDir()
	parent := filepath.Join(root, "crabbox")
	dir := filepath.Join(parent, "cbx_000000000000")
	for _, d := range []string{dir + "/work", parent + "/cbx_0123456789ab/work", parent + "/bin", parent + "/cbx_notalease"} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range []string{dir + "/" + local.HostKeyFile, dir + "/stale", parent + "/cbx_0123456789ab/" + local.HostKeyFile, parent + "/bin/crabbox"} {
		if err := os.WriteFile(f, []byte("old"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	p := payload(t)
	p.FromCheckpoint = true
	if err := p.Install(dir); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"bin/crabbox":                           "old",
		"cbx_000000000000/" + local.HostKeyFile: string(p.HostKey),
		"cbx_000000000000/" + local.RecordFile:  string(p.Record),
	}
	if diff := cmp.Diff(want, testfs.Files(t, parent)); diff != "" {
		t.Errorf("lease directories (-want +got):\n%s", diff)
	}
	if _, err := os.Stat(filepath.Join(parent, "cbx_notalease")); err != nil {
		t.Errorf("a directory not named by a lease ID was removed: %v", err)
	}
}

func TestReadRejects(t *testing.T) {
	good := payload(t)
	for _, tc := range []struct {
		name, in, want string
	}{
		{"nothing", "", "ended before it"},
		{"not JSON", "hello\n", "lease payload"},
		{"no record", `{"hostKey":"eA=="}`, "no lease record"},
		{"no host key", `{"record":"eA=="}`, "no host key"},
	} {
		if _, err := Read(strings.NewReader(tc.in)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: Read = %v, want an error containing %q", tc.name, err, tc.want)
		}
	}
	for _, root := range []string{"work", "/work/../etc"} {
		p := good
		p.WorkRoot = root
		var buf bytes.Buffer
		if err := Write(&buf, p); err != nil {
			t.Fatal(err)
		}
		if _, err := Read(&buf); err == nil || !strings.Contains(err.Error(), "work root") {
			t.Errorf("work root %q: Read = %v, want an error naming the work root", root, err)
		}
	}
	bad := good
	bad.Record = []byte("{}")
	var buf bytes.Buffer
	_ = Write(&buf, bad)
	if _, err := Read(&buf); err == nil {
		t.Errorf("a record with no lease ID was read")
	}
}
