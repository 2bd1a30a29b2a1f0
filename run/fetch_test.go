//go:build unix

package run_test

import (
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/crabbox-dev/crabbox/internal/testfs"
	"github.com/crabbox-dev/crabbox/run"
)

// resultsWorkdir makes a workdir holding good results and the ones that
// cannot come home: a name with a line break, a symlink to a file outside,
// a symlink to a directory (inside), a symlink to nothing. It returns the
// workdir and the directory outside, as the box resolves them.
func resultsWorkdir(t *testing.T) (work, outside string) {
	t.Helper()
	work, outside = realDir(t), realDir(t)
	for name, body := range map[string]string{
		"out/a.txt": "a\n", "out/sub/b.txt": "b\n", "out/new\nline.txt": "bad\n",
		"report.json": "report\n", "lib/inner.txt": "inner\n",
	} {
		p := filepath.Join(work, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(outside, "secret"), []byte("secret"), 0o644); err != nil {
		t.Fatal(err)
	}
	for link, to := range map[string]string{
		"out/secret.txt": filepath.Join(outside, "secret"), "out/lib": filepath.Join(work, "lib"),
		"out/dangling.txt": filepath.Join(work, "gone"), "secret.json": filepath.Join(outside, "secret"),
	} {
		if err := os.Symlink(to, filepath.Join(work, filepath.FromSlash(link))); err != nil {
			t.Fatal(err)
		}
	}
	return work, outside
}

func realDir(t *testing.T) string {
	t.Helper()
	dir, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

// checkResults checks what a fetch of resultsWorkdir with fetchOf
// brought home and skipped.
func checkResults(t *testing.T, work, outside, arts, here string, res run.FetchResult) {
	t.Helper()
	want := map[string]string{"out/a.txt": "a\n", "out/sub/b.txt": "b\n"}
	if diff := cmp.Diff(want, testfs.Files(t, arts)); diff != "" {
		t.Errorf("artifacts (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(map[string]string{"r.json": "report\n"}, testfs.Files(t, here)); diff != "" {
		t.Errorf("downloads (-want +got):\n%s", diff)
	}
	wantSkipped := []run.Skipped{
		{Path: "missing.json", Reason: "no such file in the workdir on the box"},
		{Path: "out/dangling.txt", Reason: "a symlink to nothing"},
		{Path: "out/lib", Reason: `a symlink to the directory "` + work + `/lib", which a glob does not follow; name it in a glob of its own (out/lib/**) to fetch what it holds`},
		{Path: "out/new\nline.txt", Reason: "its name holds a line break, which crabbox does not bring home"},
		{Path: "out/secret.txt", Reason: `a symlink to "` + outside + `/secret", outside the workdir`},
		{Path: "secret.json", Reason: `a symlink to "` + outside + `/secret", outside the workdir`},
	}
	if diff := cmp.Diff(wantSkipped, res.Skipped); diff != "" {
		t.Errorf("skipped (-want +got):\n%s", diff)
	}
	if len(res.Files) != 3 {
		t.Errorf("files %+v, want the two artifacts and the download", res.Files)
	}
}

// One bad name, one link out, a directory link and a dangling link do
// not keep the other results on the box: they are skipped and reported,
// and everything else comes home.
func TestFetchSkipsWhatCannotComeHome(t *testing.T) {
	work, outside := resultsWorkdir(t)
	arts, here := filepath.Join(t.TempDir(), "arts"), t.TempDir()
	res, err := run.FetchFiles(context.Background(), dial(t), fetchOf(work, arts, here))
	if err != nil {
		t.Fatal(err)
	}
	checkResults(t, work, outside, arts, here, res)
}

func fetchOf(work, arts, here string) run.Fetch {
	return run.Fetch{
		Dir: work, Globs: []string{"out/**"}, ArtifactsDir: arts, DownloadDir: here,
		Downloads: []run.Download{{Remote: "report.json", Local: "r.json"}, {Remote: "secret.json"}, {Remote: "missing.json"}},
	}
}

// The same through a sandbox's file API: scripts and their output travel
// as files, and the scratch directory is removed afterwards.
func TestFetchFromSandbox(t *testing.T) {
	work, outside := resultsWorkdir(t)
	scratch := t.TempDir()
	arts, here := filepath.Join(t.TempDir(), "arts"), t.TempDir()
	sb := &localSandbox{}
	res, err := run.FetchFromSandbox(context.Background(), sb, scratch, fetchOf(work, arts, here))
	if err != nil {
		t.Fatal(err)
	}
	checkResults(t, work, outside, arts, here, res)
	if left, _ := os.ReadDir(scratch); len(left) != 0 {
		t.Errorf("scratch directory left behind: %v", left)
	}
	if sb.execs != 3 {
		t.Errorf("%d commands in the sandbox, want 3 (list, archive, clean up)", sb.execs)
	}
}

// A sandbox whose archive script fails before it sends anything fails the
// fetch, naming the failure, and writes nothing.
func TestFetchFromSandboxFailure(t *testing.T) {
	work, _ := resultsWorkdir(t)
	arts, here := filepath.Join(t.TempDir(), "arts"), t.TempDir()
	sb := &localSandbox{failArchive: true}
	_, err := run.FetchFromSandbox(context.Background(), sb, t.TempDir(), fetchOf(work, arts, here))
	if err == nil || !strings.Contains(err.Error(), "sh exited 7") {
		t.Fatalf("error %v, want the archive script's exit", err)
	}
	if got := testfs.Files(t, arts); len(got) != 0 {
		t.Errorf("artifacts written by a failed fetch: %v", got)
	}
	if got := testfs.Files(t, here); len(got) != 0 {
		t.Errorf("downloads written by a failed fetch: %v", got)
	}
}

// localSandbox is a run.Sandbox on this machine.
type localSandbox struct {
	execs       int
	failArchive bool
}

func (s *localSandbox) Exec(ctx context.Context, argv []string, stderr io.Writer) (int, error) {
	s.execs++
	if s.failArchive && len(argv) == 2 && strings.HasSuffix(argv[1], "/archive.sh") {
		argv = []string{"sh", "-c", "echo broken >&2; exit 7"}
	}
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Stderr = stderr
	err := cmd.Run()
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		return exit.ExitCode(), nil
	}
	return 0, err
}

func (s *localSandbox) WriteFile(_ context.Context, p string, data []byte) error {
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return err
	}
	return os.WriteFile(p, data, 0o644)
}

func (s *localSandbox) ReadFile(_ context.Context, p string) (io.ReadCloser, error) {
	return os.Open(p)
}
