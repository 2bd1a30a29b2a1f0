package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/crabbox-dev/crabbox/history"
	"github.com/crabbox-dev/crabbox/run"
)

func TestRunArtifactsDownloadsCaptures(t *testing.T) {
	t.Parallel()
	env, repo := stateEnv(t), gitRepo(t)
	state := strings.TrimPrefix(env[0], "CRABBOX_STATE_DIR=")
	write := `mkdir -p out/sub && echo a > out/a.txt && echo b > out/sub/b.txt && echo shown; exit 3`
	r := crabboxCmd(t, env, repo, "run", "--artifacts", "out/**", "--artifacts", "none/*", "--download", "out/a.txt=got/a.txt",
		"--capture-stdout", "stdout.log", "--capture-on-fail", "--shell", write)
	if r.code != 3 || r.stdout != "shown\n" {
		t.Fatalf("exit %d, stdout %q, stderr %q; want the command's 3 and its output shown", r.code, r.stdout, r.stderr)
	}
	for _, want := range []string{
		"crabbox: artifacts: nothing matched 'none/*'",
		"crabbox: downloaded out/a.txt to " + filepath.Join(repo, "got", "a.txt"),
		"crabbox: artifacts: 2 files (4 B) in " + filepath.Join(state, "artifacts", "run_"),
	} {
		if !strings.Contains(r.stderr, want) {
			t.Errorf("stderr %q does not contain %q", r.stderr, want)
		}
	}
	for file, want := range map[string]string{"got/a.txt": "a\n", "stdout.log": "shown\n"} {
		if data, err := os.ReadFile(filepath.Join(repo, file)); err != nil || string(data) != want {
			t.Errorf("%s: %q (%v), want %q", file, data, err, want)
		}
	}
	r = crabboxCmd(t, env, repo, "history", "--json")
	var entries []history.Entry
	if err := json.Unmarshal([]byte(r.stdout), &entries); err != nil || len(entries) != 1 {
		t.Fatalf("history --json = %q (%v), want one entry", r.stdout, err)
	}
	var kinds []string
	for _, a := range entries[0].Artifacts {
		kinds = append(kinds, a.Kind+" "+a.Remote)
		if _, err := os.Stat(a.Local); err != nil {
			t.Errorf("history lists %s, which is not there: %v", a.Local, err)
		}
	}
	if got := strings.Join(kinds, ", "); got != "artifact out/a.txt, artifact out/sub/b.txt, download out/a.txt, stdout " {
		t.Errorf("history's artifacts: %s", got)
	}
	if !strings.HasPrefix(entries[0].ArtifactsDir, filepath.Join(state, "artifacts")) {
		t.Errorf("history's artifacts directory %q, want one in the state directory", entries[0].ArtifactsDir)
	}
}

// The result policies: files that cannot come home are skipped with one
// warning line each and the command's exit code stands, unless
// --artifacts-strict; local targets go where the user said, outside the
// start directory too; a capture's folder is made.
func TestRunResultPolicies(t *testing.T) {
	t.Parallel()
	env, repo := stateEnv(t), gitRepo(t)
	elsewhere := t.TempDir()
	write := `mkdir -p out && echo a > out/a.txt && printf x > 'out/new` + "\n" + `line' && ln -s /etc out/etc && echo r > r.json && echo shown`
	args := []string{"run", "--artifacts", "out/**", "--artifacts-dir", filepath.Join(elsewhere, "arts"),
		"--download", "r.json=../up-" + filepath.Base(repo) + "/r.json", "--download", "r.json=" + filepath.Join(elsewhere, "abs", "r.json"),
		"--capture-stdout", "cap/out.log", "--shell", write}
	r := crabboxCmd(t, env, repo, args...)
	if r.code != 0 || r.stdout != "shown\n" {
		t.Fatalf("exit %d, stdout %q, stderr %q; want 0", r.code, r.stdout, r.stderr)
	}
	for _, want := range []string{
		`crabbox: warning: "out/etc" stayed on the box: a symlink to the directory "`,
		`crabbox: warning: "out/new\nline" stayed on the box: its name holds a line break`,
	} {
		if !strings.Contains(r.stderr, want) {
			t.Errorf("stderr %q does not contain %q", r.stderr, want)
		}
	}
	for file, want := range map[string]string{
		filepath.Join(elsewhere, "arts", "out", "a.txt"): "a\n", filepath.Join(elsewhere, "abs", "r.json"): "r\n",
		filepath.Join(filepath.Dir(repo), "up-"+filepath.Base(repo), "r.json"): "r\n", filepath.Join(repo, "cap", "out.log"): "shown\n",
	} {
		if data, err := os.ReadFile(file); err != nil || string(data) != want {
			t.Errorf("%s: %q (%v), want %q", file, data, err, want)
		}
	}
	strict := append([]string{"run", "--artifacts-strict", "--artifacts", "out/**", "--artifacts-dir", filepath.Join(elsewhere, "strict")}, "--shell", write)
	r = crabboxCmd(t, env, repo, strict...)
	if r.code != 125 || !strings.Contains(r.stderr, "2 of the files to bring home stayed on the box") || !strings.Contains(r.stderr, `crabbox: warning: "out/etc" stayed on the box`) {
		t.Errorf("--artifacts-strict: exit %d, stderr %q; want 125, the warnings and the error", r.code, r.stderr)
	}
	if data, err := os.ReadFile(filepath.Join(elsewhere, "strict", "out", "a.txt")); err != nil || string(data) != "a\n" {
		t.Errorf("--artifacts-strict: the good file %q (%v), want it home", data, err)
	}
}

func TestRunArtifactsErrors(t *testing.T) {
	t.Parallel()
	env, repo := stateEnv(t), gitRepo(t)
	for _, tt := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"--artifacts", "../x"}, 2, `".." element`},
		{[]string{"--artifacts", "/etc/*"}, 2, "absolute"},
		{[]string{"--download", "../a=b"}, 2, `".." element`},
		{[]string{"--artifacts-max-size", "lots"}, 2, "not a size"},
		{[]string{"--capture-on-fail"}, 2, "needs --capture-stdout"},
		{[]string{"--artifacts", "*.txt", "--artifacts-max-size", "10B"}, 125, "raise --artifacts-max-size"},
		{[]string{"--artifacts", "*.txt", "--artifacts-dir", repo}, 125, "--artifacts-overwrite replaces it"},
	} {
		r := crabboxCmd(t, env, repo, append(append([]string{"run"}, tt.args...), "--", "true")...)
		if r.code != tt.code || !strings.Contains(r.stderr, tt.want) {
			t.Errorf("run %v: exit %d, stderr %q; want %d and %q", tt.args, r.code, r.stderr, tt.code, tt.want)
		}
	}
}

func TestByteSizeFlag(t *testing.T) {
	for in, want := range map[string]int64{"1048576": 1 << 20, "500MiB": 500 << 20, "2G": 2 << 30, "1.5 KiB": 1536, "10b": 10} {
		var b byteSize
		if err := b.Set(in); err != nil || int64(b) != want {
			t.Errorf("Set(%q) = %d, %v; want %d", in, b, err, want)
		}
	}
	for _, in := range []string{"", "0", "-1", "lots", "5 PiB", "1e30"} {
		var b byteSize
		if err := b.Set(in); err == nil {
			t.Errorf("Set(%q) = %d, want an error", in, b)
		}
	}
	if got := new(byteSize).String(); got != run.FormatBytes(0) {
		t.Errorf("String() = %q", got)
	}
}
