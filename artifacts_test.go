package crabbox_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/crabbox-dev/crabbox"
	"github.com/crabbox-dev/crabbox/internal/testfs"
	"github.com/crabbox-dev/crabbox/run"
)

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
	if diff := cmp.Diff(want, testfs.Files(t, wantDir)); diff != "" {
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
	if diff := cmp.Diff(want, testfs.Files(t, dir)); diff != "" || res.ExitCode != 3 {
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
	if diff := cmp.Diff(want, testfs.Files(t, dir)); diff != "" {
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
	if diff := cmp.Diff(want, testfs.Files(t, here)); diff != "" {
		t.Errorf("downloads (-want +got):\n%s", diff)
	}
	if len(res.Artifacts) != 2 || res.Artifacts[0].Kind != run.KindDownload || res.ArtifactsDir != "" {
		t.Errorf("result: artifacts %+v in %q, want the two downloads and no artifacts directory", res.Artifacts, res.ArtifactsDir)
	}
	res, err = c.Run(context.Background(), crabbox.RunRequest{
		Root: gitRepo(t), Shell: "true", Downloads: []run.Download{{Remote: "missing.txt"}}, DownloadDir: here,
	})
	want2 := []run.Skipped{{Path: "missing.txt", Reason: "no such file in the workdir on the box"}}
	if diff := cmp.Diff(want2, res.ArtifactsSkipped); err != nil || diff != "" {
		t.Errorf("download of a missing file: %v; skipped (-want +got):\n%s", err, diff)
	}
	noLeases(t, c)
}

// A local path the user typed goes where it says, outside the directory
// the run started from too (absolute, or with ".."), its folders made;
// the overwrite rule still holds.
func TestRunDownloadsToLocalPathsOutside(t *testing.T) {
	c := newClient(t, t.TempDir())
	top := t.TempDir()
	here := filepath.Join(top, "start")
	abs := filepath.Join(top, "elsewhere", "deep", "abs.json")
	req := crabbox.RunRequest{
		Root: gitRepo(t), Shell: "echo report > report.json",
		Downloads:   []run.Download{{Remote: "report.json", Local: "../up/r.json"}, {Remote: "report.json", Local: abs}},
		DownloadDir: here,
	}
	res, err := c.Run(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"up/r.json": "report\n", "elsewhere/deep/abs.json": "report\n"}
	if diff := cmp.Diff(want, testfs.Files(t, top)); diff != "" {
		t.Errorf("downloads (-want +got):\n%s", diff)
	}
	if len(res.Artifacts) != 2 || res.Artifacts[0].Local != filepath.Join(top, "up", "r.json") || res.Artifacts[1].Local != abs {
		t.Errorf("result's downloads %+v", res.Artifacts)
	}
	if _, err := c.Run(context.Background(), req); !errors.Is(err, run.ErrFileExists) {
		t.Errorf("second download over the first: %v, want ErrFileExists", err)
	}
	req.ArtifactsOverwrite = true
	if _, err := c.Run(context.Background(), req); err != nil {
		t.Errorf("second download with overwrite: %v", err)
	}
	noLeases(t, c)
}

// Results that cannot come home (a name with a line break, a symlink out
// of the workdir, a directory symlink under **) are skipped and reported;
// the others come home, and only ArtifactsStrict fails the run for them.
func TestRunSkipsResultsThatCannotComeHome(t *testing.T) {
	outside := t.TempDir()
	if err := os.WriteFile(filepath.Join(outside, "secret.txt"), []byte("secret"), 0o644); err != nil {
		t.Fatal(err)
	}
	shell := "mkdir -p out/lib && echo a > out/a.txt && echo lib > out/lib/l.txt && printf bad > 'out/new\nline.txt' && " +
		"ln -s " + filepath.Join(outside, "secret.txt") + " out/secret.txt && ln -s lib out/dirlink && echo r > r.json"
	repo := gitRepo(t)
	c := newClient(t, t.TempDir())
	req := crabbox.RunRequest{Root: repo, Shell: shell, Artifacts: []string{"out/**"}, Downloads: []run.Download{{Remote: "r.json"}}}
	wantPaths := []string{"out/dirlink", "out/new\nline.txt", "out/secret.txt"}
	for _, tt := range []struct {
		name    string
		strict  bool
		exit    int
		wantErr bool
	}{
		{"not strict", false, 0, false},
		{"strict", true, 0, true},
		{"strict, failing command", true, 3, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			req := req
			req.Shell += fmt.Sprintf("; exit %d", tt.exit)
			req.ArtifactsDir, req.DownloadDir, req.ArtifactsStrict, req.RecordHistory = t.TempDir(), t.TempDir(), tt.strict, true
			res, err := c.Run(context.Background(), req)
			if tt.wantErr != (err != nil) || err != nil && (!errors.Is(err, run.ErrIncomplete) || !strings.Contains(err.Error(), `3 of the files to bring home stayed on the box ("out/dirlink": a symlink to the directory`)) {
				t.Fatalf("error %v, want an ErrIncomplete naming them: %v", err, tt.wantErr)
			}
			if res.ExitCode != tt.exit {
				t.Errorf("exit %d, want the command's %d", res.ExitCode, tt.exit)
			}
			want := map[string]string{"out/a.txt": "a\n", "out/lib/l.txt": "lib\n"}
			if diff := cmp.Diff(want, testfs.Files(t, req.ArtifactsDir)); diff != "" {
				t.Errorf("artifacts (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(map[string]string{"r.json": "r\n"}, testfs.Files(t, req.DownloadDir)); diff != "" {
				t.Errorf("downloads (-want +got):\n%s", diff)
			}
			var paths []string
			for _, s := range res.ArtifactsSkipped {
				paths = append(paths, s.Path)
			}
			if diff := cmp.Diff(wantPaths, paths); diff != "" {
				t.Errorf("skipped (-want +got):\n%s", diff)
			}
			if len(res.Artifacts) != 3 {
				t.Errorf("result's files %+v, want the two artifacts and the download", res.Artifacts)
			}
		})
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
			if diff := cmp.Diff(want, testfs.Files(t, dir)); diff != "" {
				t.Errorf("captured files (-want +got):\n%s", diff)
			}
			if tt.wantKept != (len(res.Artifacts) == 2) {
				t.Errorf("result's artifacts %+v, want the captures listed when kept", res.Artifacts)
			}
		})
	}
}

// A capture's missing folders are made, as a download's are; when the
// capture is not kept, the folders made for it go too.
func TestRunCapturesMakeTheirFolders(t *testing.T) {
	c := newClient(t, t.TempDir())
	repo := gitRepo(t)
	dir := t.TempDir()
	out := filepath.Join(dir, "cap", "deep", "out.log")
	if _, err := c.Run(context.Background(), crabbox.RunRequest{Root: repo, Shell: "echo out", CaptureStdout: out}); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(map[string]string{"cap/deep/out.log": "out\n"}, testfs.Files(t, dir)); diff != "" {
		t.Errorf("captured (-want +got):\n%s", diff)
	}
	other := filepath.Join(dir, "other", "err.log")
	if _, err := c.Run(context.Background(), crabbox.RunRequest{Root: repo, Shell: "true", CaptureStderr: other, CaptureOnFail: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Dir(other)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("folder of a capture not kept: %v, want it removed", err)
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
		{"symlink to a file outside", "ln -s " + filepath.Join(outside, "secret.txt") + " link.txt", "*.txt", `a symlink to "`},
		{"symlinked directory outside", "ln -s " + outside + " linked", "linked/*.txt", `leads to "`},
	}
	for _, tt := range after {
		t.Run(tt.name, func(t *testing.T) {
			c := newClient(t, t.TempDir())
			dir := t.TempDir()
			res, err := c.Run(context.Background(), crabbox.RunRequest{Root: repo, Shell: tt.shell, Artifacts: []string{tt.glob}, ArtifactsDir: dir})
			if err != nil {
				t.Fatal(err)
			}
			if len(res.ArtifactsSkipped) != 1 || !strings.Contains(res.ArtifactsSkipped[0].Reason, tt.want) {
				t.Errorf("skipped %+v, want one saying %s", res.ArtifactsSkipped, tt.want)
			}
			if res.ExitCode != 0 {
				t.Errorf("exit %d, want the command's 0 kept in the result", res.ExitCode)
			}
			if got := testfs.Files(t, dir); strings.Contains(fmt.Sprint(got), "secret") {
				t.Errorf("the outside file was fetched: %v", got)
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
	if diff := cmp.Diff(map[string]string{"inside.txt": "committed\n"}, testfs.Files(t, dir)); diff != "" {
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
	if diff := cmp.Diff(map[string]string{"committed.txt": "mine"}, testfs.Files(t, dir)); diff != "" {
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
	if diff := cmp.Diff(want, testfs.Files(t, dir)); diff != "" {
		t.Errorf("with overwrite (-want +got):\n%s", diff)
	}
	noLeases(t, c)
}
