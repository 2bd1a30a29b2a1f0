package crabbox_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/crabbox-dev/crabbox"
	"github.com/crabbox-dev/crabbox/run"
)

// files returns the files below dir (relative, slash-separated) with their
// contents.
func files(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := os.ReadFile(p)
		rel, _ := filepath.Rel(dir, p)
		out[filepath.ToSlash(rel)] = string(data)
		return err
	})
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	return out
}

const makeOutputs = `mkdir -p out/sub && echo a > out/a.txt && echo b > out/sub/b.txt && echo c > out/sub/c.log && echo top > top.txt`

func TestRunArtifactsOfSuccessfulRun(t *testing.T) {
	state := t.TempDir()
	c := newClient(t, state)
	res, err := c.Run(context.Background(), crabbox.RunRequest{
		Root: gitRepo(t), Shell: makeOutputs, RecordHistory: true,
		Artifacts: []string{"out/**/*.txt", "./top.txt", "nothing/*"},
	})
	if err != nil {
		t.Fatal(err)
	}
	wantDir := filepath.Join(state, "artifacts", res.RunID)
	if res.ExitCode != 0 || res.ArtifactsDir != wantDir {
		t.Fatalf("exit %d, artifacts in %q; want 0 and %q", res.ExitCode, res.ArtifactsDir, wantDir)
	}
	want := map[string]string{"out/a.txt": "a\n", "out/sub/b.txt": "b\n", "top.txt": "top\n"}
	if diff := cmp.Diff(want, files(t, wantDir)); diff != "" {
		t.Errorf("artifacts (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"nothing/*"}, res.ArtifactsUnmatched); diff != "" {
		t.Errorf("unmatched (-want +got):\n%s", diff)
	}
	wantFiles := []run.Artifact{
		{Kind: run.KindArtifact, Remote: "out/a.txt", Local: filepath.Join(wantDir, "out", "a.txt"), Size: 2},
		{Kind: run.KindArtifact, Remote: "out/sub/b.txt", Local: filepath.Join(wantDir, "out", "sub", "b.txt"), Size: 2},
		{Kind: run.KindArtifact, Remote: "top.txt", Local: filepath.Join(wantDir, "top.txt"), Size: 4},
	}
	if diff := cmp.Diff(wantFiles, res.Artifacts); diff != "" {
		t.Errorf("result's artifacts (-want +got):\n%s", diff)
	}
	entries, err := c.History().List(1)
	if err != nil || len(entries) != 1 {
		t.Fatalf("history: %v, %v", entries, err)
	}
	if diff := cmp.Diff(wantFiles, entries[0].Artifacts); diff != "" || entries[0].ArtifactsDir != wantDir {
		t.Errorf("history's artifacts in %q (-want +got):\n%s", entries[0].ArtifactsDir, diff)
	}
	noLeases(t, c)
}

func TestRunArtifactsOfFailedRunKeepExitCode(t *testing.T) {
	c := newClient(t, t.TempDir())
	dir := filepath.Join(t.TempDir(), "results")
	res, err := c.Run(context.Background(), crabbox.RunRequest{
		Root: gitRepo(t), Shell: makeOutputs + "; exit 3", Artifacts: []string{"out"}, ArtifactsDir: dir,
	})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"out/a.txt": "a\n", "out/sub/b.txt": "b\n", "out/sub/c.log": "c\n"}
	if diff := cmp.Diff(want, files(t, dir)); diff != "" || res.ExitCode != 3 {
		t.Errorf("exit %d; artifacts (-want +got):\n%s", res.ExitCode, diff)
	}
	noLeases(t, c)
}

func TestRunArtifactsOfTimedOutRun(t *testing.T) {
	c := newClient(t, t.TempDir())
	dir := t.TempDir()
	res, err := c.Run(context.Background(), crabbox.RunRequest{
		Root: gitRepo(t), Shell: "echo partial > progress.txt; exec sleep 60", Timeout: 300 * time.Millisecond,
		Artifacts: []string{"*.txt"}, ArtifactsDir: dir,
	})
	if err != nil {
		t.Fatal(err)
	}
	if !res.TimedOut || res.ExitCode != run.ExitTimeout {
		t.Errorf("exit %d, timed out %v; want %d", res.ExitCode, res.TimedOut, run.ExitTimeout)
	}
	want := map[string]string{"progress.txt": "partial\n", "committed.txt": "committed\n", "untracked.txt": "untracked\n"}
	if diff := cmp.Diff(want, files(t, dir)); diff != "" {
		t.Errorf("artifacts (-want +got):\n%s", diff)
	}
	noLeases(t, c)
}

func TestRunDownloads(t *testing.T) {
	c := newClient(t, t.TempDir())
	here := t.TempDir()
	res, err := c.Run(context.Background(), crabbox.RunRequest{
		Root: gitRepo(t), Shell: "mkdir -p deep && echo report > deep/report.json",
		Downloads:   []run.Download{{Remote: "deep/report.json", Local: "got/r.json"}, {Remote: "deep/report.json"}},
		DownloadDir: here,
	})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"got/r.json": "report\n", "report.json": "report\n"}
	if diff := cmp.Diff(want, files(t, here)); diff != "" {
		t.Errorf("downloads (-want +got):\n%s", diff)
	}
	if len(res.Artifacts) != 2 || res.Artifacts[0].Kind != run.KindDownload || res.ArtifactsDir != "" {
		t.Errorf("result: artifacts %+v in %q, want the two downloads and no artifacts directory", res.Artifacts, res.ArtifactsDir)
	}
	_, err = c.Run(context.Background(), crabbox.RunRequest{
		Root: gitRepo(t), Shell: "true", Downloads: []run.Download{{Remote: "missing.txt"}}, DownloadDir: here,
	})
	if err == nil || !strings.Contains(err.Error(), `"missing.txt"`) {
		t.Errorf("download of a missing file: %v, want an error naming it", err)
	}
	noLeases(t, c)
}

func TestRunCaptures(t *testing.T) {
	c := newClient(t, t.TempDir())
	repo := gitRepo(t)
	for _, tt := range []struct {
		name     string
		shell    string
		onFail   bool
		wantKept bool
	}{
		{"always", "echo out; echo err >&2", false, true},
		{"on fail, passing", "echo out; echo err >&2", true, false},
		{"on fail, failing", "echo out; echo err >&2; exit 1", true, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			outFile, errFile := filepath.Join(dir, "out.log"), filepath.Join(dir, "err.log")
			var shown strings.Builder
			res, err := c.Run(context.Background(), crabbox.RunRequest{
				Root: repo, Shell: tt.shell, Stdout: &shown, Stderr: &shown,
				CaptureStdout: outFile, CaptureStderr: errFile, CaptureOnFail: tt.onFail,
			})
			if err != nil {
				t.Fatal(err)
			}
			if shown.String() != "out\nerr\n" && shown.String() != "err\nout\n" {
				t.Errorf("shown %q, want both streams", shown.String())
			}
			want := map[string]string{}
			if tt.wantKept {
				want = map[string]string{"out.log": "out\n", "err.log": "err\n"}
			}
			if diff := cmp.Diff(want, files(t, dir)); diff != "" {
				t.Errorf("captured files (-want +got):\n%s", diff)
			}
			if tt.wantKept != (len(res.Artifacts) == 2) {
				t.Errorf("result's artifacts %+v, want the captures listed when kept", res.Artifacts)
			}
		})
	}
}

func TestRunFetchEscapesRefused(t *testing.T) {
	repo := gitRepo(t)
	outside := t.TempDir()
	if err := os.WriteFile(filepath.Join(outside, "secret.txt"), []byte("secret"), 0o644); err != nil {
		t.Fatal(err)
	}
	before := []struct {
		name string
		req  crabbox.RunRequest
		want string
	}{
		{"dot-dot glob", crabbox.RunRequest{Artifacts: []string{"out/../../x"}}, `".."`},
		{"absolute glob", crabbox.RunRequest{Artifacts: []string{"/etc/*"}}, "absolute"},
		{"dot-dot download", crabbox.RunRequest{Downloads: []run.Download{{Remote: "../x"}}}, `".."`},
		{"absolute download", crabbox.RunRequest{Downloads: []run.Download{{Remote: "/etc/hostname"}}}, "absolute"},
		{"download leaving the local directory", crabbox.RunRequest{Downloads: []run.Download{{Remote: "x", Local: "../x"}}}, `".."`},
		{"absolute local download", crabbox.RunRequest{Downloads: []run.Download{{Remote: "x", Local: filepath.Join(outside, "x")}}}, "absolute"},
	}
	for _, tt := range before {
		t.Run(tt.name, func(t *testing.T) {
			state := t.TempDir()
			c := newClient(t, state)
			tt.req.Root, tt.req.Command, tt.req.RecordHistory = repo, []string{"true"}, true
			_, err := c.Run(context.Background(), tt.req)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error %v, want one saying %s", err, tt.want)
			}
			if entries, _ := c.History().List(0); len(entries) != 0 {
				t.Errorf("a refused run was recorded: %+v", entries)
			}
			noLeases(t, c)
		})
	}
	after := []struct {
		name, shell, glob, want string
	}{
		{"symlink to a file outside", "ln -s " + filepath.Join(outside, "secret.txt") + " link.txt", "*.txt", `"link.txt" is a symlink to`},
		{"symlinked directory outside", "ln -s " + outside + " linked", "linked/*.txt", `"linked" leads to`},
	}
	for _, tt := range after {
		t.Run(tt.name, func(t *testing.T) {
			c := newClient(t, t.TempDir())
			dir := t.TempDir()
			res, err := c.Run(context.Background(), crabbox.RunRequest{Root: repo, Shell: tt.shell, Artifacts: []string{tt.glob}, ArtifactsDir: dir})
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error %v, want one saying %s", err, tt.want)
			}
			if res.ExitCode != 0 {
				t.Errorf("exit %d, want the command's 0 kept in the result", res.ExitCode)
			}
			if got := files(t, dir); len(got) != 0 {
				t.Errorf("files fetched despite the refusal: %v", got)
			}
			noLeases(t, c)
		})
	}
	// A symlink that stays inside the workdir is followed.
	c := newClient(t, t.TempDir())
	dir := t.TempDir()
	if _, err := c.Run(context.Background(), crabbox.RunRequest{
		Root: repo, Shell: "ln -s committed.txt inside.txt", Artifacts: []string{"inside.txt"}, ArtifactsDir: dir,
	}); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(map[string]string{"inside.txt": "committed\n"}, files(t, dir)); diff != "" {
		t.Errorf("symlink inside (-want +got):\n%s", diff)
	}
}

func TestRunArtifactsSizeLimit(t *testing.T) {
	c := newClient(t, t.TempDir())
	dir := filepath.Join(t.TempDir(), "new")
	res, err := c.Run(context.Background(), crabbox.RunRequest{
		Root: gitRepo(t), Shell: "mkdir big && head -c 1000 /dev/zero > big/a && head -c 1000 /dev/zero > big/b && exit 5",
		Artifacts: []string{"big"}, ArtifactsDir: dir, ArtifactsMaxBytes: 1500,
	})
	if !errors.Is(err, run.ErrFetchTooLarge) || !strings.Contains(err.Error(), "1.5 KiB") {
		t.Fatalf("error %v, want one about the 1.5 KiB limit", err)
	}
	if res.ExitCode != 5 || !strings.Contains(err.Error(), "exited 5") {
		t.Errorf("exit %d, error %v; want the command's 5 kept and named", res.ExitCode, err)
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("artifacts directory left behind after the refused fetch: %v", err)
	}
	noLeases(t, c)
}

func TestRunArtifactsNoOverwrite(t *testing.T) {
	c := newClient(t, t.TempDir())
	repo := gitRepo(t)
	dir := t.TempDir()
	existing := filepath.Join(dir, "committed.txt")
	if err := os.WriteFile(existing, []byte("mine"), 0o644); err != nil {
		t.Fatal(err)
	}
	req := crabbox.RunRequest{Root: repo, Shell: "echo new > new.txt", Artifacts: []string{"*.txt"}, ArtifactsDir: dir}
	_, err := c.Run(context.Background(), req)
	if !errors.Is(err, run.ErrFileExists) || !strings.Contains(err.Error(), existing) {
		t.Fatalf("error %v, want one naming %s as existing", err, existing)
	}
	if diff := cmp.Diff(map[string]string{"committed.txt": "mine"}, files(t, dir)); diff != "" {
		t.Errorf("local files changed by a refused fetch (-want +got):\n%s", diff)
	}
	if _, err := c.Run(context.Background(), crabbox.RunRequest{Root: repo, Shell: "echo x", CaptureStdout: existing}); !errors.Is(err, run.ErrFileExists) {
		t.Errorf("capture over an existing file: %v, want ErrFileExists", err)
	}
	req.ArtifactsOverwrite = true
	if _, err := c.Run(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"committed.txt": "committed\n", "new.txt": "new\n", "untracked.txt": "untracked\n"}
	if diff := cmp.Diff(want, files(t, dir)); diff != "" {
		t.Errorf("with overwrite (-want +got):\n%s", diff)
	}
	noLeases(t, c)
}
