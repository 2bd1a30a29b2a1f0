package external_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/crabbox-dev/crabbox/lease"
	"github.com/crabbox-dev/crabbox/provider"
	"github.com/crabbox-dev/crabbox/provider/providertest"
	"github.com/crabbox-dev/crabbox/providers/external"
)

// fakeFilesBackend is a delegated backend with files whose program is this
// test binary in the given mode.
func fakeFilesBackend(t *testing.T, mode string) (*external.DelegatedFileBackend, string) {
	t.Helper()
	raw, log := delegatedConfig(t, mode, provider.Config{"files": "true", "timeout": "1m"})
	b, err := external.Provider{}.Configure(raw, provider.Runtime{})
	if err != nil {
		t.Fatal(err)
	}
	fb, ok := b.(*external.DelegatedFileBackend)
	if !ok || !fb.Spec().Has(provider.FeatureFiles) {
		t.Fatalf("Configure with files = %T, features %v; want a *external.DelegatedFileBackend with files", b, b.Spec().Features)
	}
	return fb, log
}

// The conformance suite, files included, on the example program: the
// sandbox of a lease is its box's work directory on this machine.
func TestConformanceFiles(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("the example program serves boxes with /bin/sh")
	}
	providertest.RunDelegated(t, providertest.DelegatedHarness{
		NewBackend: func(t *testing.T) provider.DelegatedRunBackend {
			c := exampleConfig(t)
			c.Mode, c.Files = external.ModeDelegatedRun, true
			// Commands in the boxes get this HOME (the suite writes there).
			c.Env = map[string]string{"HOME": t.TempDir()}
			b, err := external.NewDelegatedFiles(c, provider.Runtime{})
			if err != nil {
				t.Fatal(err)
			}
			if !b.Spec().Has(provider.FeatureFiles) {
				t.Fatalf("spec features = %v, want %s", b.Spec().Features, provider.FeatureFiles)
			}
			return b
		},
		Timeout:      2 * time.Minute,
		Signals:      true,
		ProcessTable: runtime.GOOS == "linux",
	})
}

// WriteFile sends MaxFileChunk bytes per call at increasing offsets, with
// the mode, and one call for an empty file.
func TestWriteFileChunks(t *testing.T) {
	b, log := fakeFilesBackend(t, "files")
	ctx := context.Background()
	id := lease.NewID()
	body := bytes.Repeat([]byte{0, 1, 2, 0xff}, external.MaxFileChunk/2) // two chunks exactly
	body = append(body, "tail"...)
	if err := b.WriteFile(ctx, provider.WriteFileRequest{LeaseID: id, Path: "/w/archive.tar", Mode: 0o600, Body: bytes.NewReader(body), Size: -1}); err != nil {
		t.Fatal(err)
	}
	if err := b.WriteFile(ctx, provider.WriteFileRequest{LeaseID: id, Path: "/w/empty", Mode: 0o755, Body: strings.NewReader(""), Size: 0}); err != nil {
		t.Fatal(err)
	}
	type write struct {
		LeaseID string
		Path    string
		Offset  int64
		Mode    uint32
		Data    []byte
	}
	var got []write
	for _, r := range requests(t, log) {
		if r.Operation == external.OpWriteFile {
			got = append(got, write{r.Lease.LeaseID, r.File.Path, r.File.Offset, r.File.Mode, r.File.Data})
		}
	}
	c := external.MaxFileChunk
	want := []write{
		{id, "/w/archive.tar", 0, 0o600, body[:c]},
		{id, "/w/archive.tar", int64(c), 0o600, body[c : 2*c]},
		{id, "/w/archive.tar", int64(2 * c), 0o600, []byte("tail")},
		{id, "/w/empty", 0, 0o755, nil},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("write-file requests (-want +got):\n%s", diff)
	}
}

func TestWriteFileRejects(t *testing.T) {
	b, log := fakeFilesBackend(t, "files")
	ctx := context.Background()
	id := lease.NewID()
	err := b.WriteFile(ctx, provider.WriteFileRequest{LeaseID: id, Path: "rel/x", Body: strings.NewReader("x"), Size: 1})
	if err == nil || !strings.Contains(err.Error(), `path "rel/x" is not absolute`) {
		t.Errorf("relative path: err = %v", err)
	}
	err = b.WriteFile(ctx, provider.WriteFileRequest{LeaseID: id, Path: "/x", Body: strings.NewReader("xy"), Size: 3})
	if err == nil || !strings.Contains(err.Error(), "had 2 bytes, want 3") {
		t.Errorf("short body: err = %v", err)
	}
	for _, r := range requests(t, log) {
		if r.Operation == external.OpWriteFile && r.File.Path == "rel/x" {
			t.Errorf("a relative path reached the program: %+v", r.File)
		}
	}
}

// ReadFile asks for chunks at increasing offsets until eof; a missing file
// is ErrNotFound; malformed answers are errors naming what is wrong.
func TestReadFile(t *testing.T) {
	ctx := context.Background()
	id := lease.NewID()
	b, log := fakeFilesBackend(t, "files")
	rc, err := b.ReadFile(ctx, provider.ReadFileRequest{LeaseID: id, Path: "/w/manifest"})
	if err != nil {
		t.Fatal(err)
	}
	data, err := io.ReadAll(rc)
	rc.Close()
	if err != nil || string(data) != fakeContent {
		t.Errorf("ReadFile = %d bytes, %v; want the %d bytes of the file", len(data), err, len(fakeContent))
	}
	var offsets []int64
	for _, r := range requests(t, log) {
		if r.Operation == external.OpReadFile {
			if r.File.Length != external.MaxFileChunk {
				t.Errorf("read-file length = %d, want %d", r.File.Length, external.MaxFileChunk)
			}
			offsets = append(offsets, r.File.Offset)
		}
	}
	if diff := cmp.Diff([]int64{0, external.MaxFileChunk}, offsets); diff != "" {
		t.Errorf("read-file offsets (-want +got):\n%s", diff)
	}
	if _, err := b.ReadFile(ctx, provider.ReadFileRequest{LeaseID: id, Path: "/missing"}); !errors.Is(err, provider.ErrNotFound) {
		t.Errorf("ReadFile of a missing file: err = %v, want ErrNotFound", err)
	}

	for mode, wantErr := range map[string]string{
		"files-no-chunk": "response has no field file",
		"files-oversize": "more than the 524288 asked for",
		"files-stuck":    "no file.data and no file.eof at offset 0",
	} {
		b, _ := fakeFilesBackend(t, mode)
		_, err := b.ReadFile(ctx, provider.ReadFileRequest{LeaseID: id, Path: "/w/x"})
		if err == nil || !strings.Contains(err.Error(), wantErr) {
			t.Errorf("%s: ReadFile err = %v, want one containing %q", mode, err, wantErr)
		}
	}
}

// A program without capabilities.files cannot back files = true; nothing
// is acquired.
func TestFilesNeedCapability(t *testing.T) {
	raw, log := delegatedConfig(t, "run", provider.Config{"files": "true"})
	c, err := external.ParseConfig(raw)
	if err != nil {
		t.Fatal(err)
	}
	b, err := external.NewDelegatedFiles(c, provider.Runtime{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	_, err = b.Warmup(ctx, provider.WarmupRequest{LeaseID: lease.NewID(), Slug: "file-crab"})
	if !errors.Is(err, provider.ErrPrecondition) || !strings.Contains(err.Error(), "capabilities.files") {
		t.Errorf("Warmup err = %v, want a precondition error naming capabilities.files", err)
	}
	err = b.WriteFile(ctx, provider.WriteFileRequest{LeaseID: lease.NewID(), Path: "/x", Body: strings.NewReader("x"), Size: 1})
	if !errors.Is(err, provider.ErrPrecondition) {
		t.Errorf("WriteFile err = %v, want a precondition error", err)
	}
	for _, r := range requests(t, log) {
		if r.Operation != external.OpCapabilities {
			t.Errorf("the program got %s; want only capabilities", r.Operation)
		}
	}
}

func TestFilesConfig(t *testing.T) {
	_, err := external.ParseConfig(provider.Config{"command": "x", "files": "true"})
	if err == nil || !strings.Contains(err.Error(), `"files" needs mode "delegated-run"`) {
		t.Errorf("files in ssh-lease mode: err = %v", err)
	}
	_, err = external.ParseConfig(provider.Config{"command": "x", "mode": external.ModeDelegatedRun, "files": "maybe"})
	if err == nil || !strings.Contains(err.Error(), `"files"`) {
		t.Errorf("files = maybe: err = %v", err)
	}
	b, err := external.Provider{}.Configure(provider.Config{"command": "/bin/true", "mode": external.ModeDelegatedRun}, provider.Runtime{})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := b.(provider.DelegatedFileBackend); ok || b.Spec().Has(provider.FeatureFiles) {
		t.Errorf("delegated-run without files = %T with features %v, want no files", b, b.Spec().Features)
	}
}
