package main

import (
	"bytes"
	stdcmp "cmp"
	"context"
	"flag"
	"github.com/crabbox-dev/crabbox/provider"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// testdata is absolute: TestGolden changes the working directory.
var testdata, _ = filepath.Abs("testdata")

var update = flag.Bool("update", false, "rewrite the golden files in testdata/ with the current output")

// normalizers replace what differs from run to run (IDs, slugs, times,
// ports, temporary paths, durations) so outputs compare as text.
var normalizers = []struct {
	re   *regexp.Regexp
	with string
}{
	{regexp.MustCompile(`cbx_[0-9a-f]{12}`), "cbx_LEASE"},
	{regexp.MustCompile(`run_[0-9a-f]{12}`), "run_RUN"},
	{regexp.MustCompile(`\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(\.\d+)?Z?`), "TIME"},
	{regexp.MustCompile(`"(port|leaseMs|connectMs|syncMs|syncPlanMs|syncTransferMs|syncApplyMs|commandMs|totalMs)":( ?)\d+`), `"$1":${2}N`},
	{regexp.MustCompile(`(127\.0\.0\.1):\d+`), "$1:PORT"},
	{regexp.MustCompile(`\b(\d+m)?\d+(\.\d+)?(ns|µs|ms|s)\b`), "DUR"},
	// Table columns pad to the widest cell, which varies with slugs.
	{regexp.MustCompile(`(\S) {2,}`), "$1  "},
}

func normalize(s string, replace map[string]string) string {
	// Longest first, so a path is replaced before its base name.
	froms := slices.SortedFunc(maps.Keys(replace), func(a, b string) int { return stdcmp.Compare(len(b), len(a)) })
	for _, from := range froms {
		s = strings.ReplaceAll(s, from, replace[from])
	}
	for _, n := range normalizers {
		s = n.re.ReplaceAllString(s, n.with)
	}
	return s
}

// golden compares got with testdata/name.golden (or rewrites it with -update).
func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join(testdata, name+".golden")
	if *update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test ./cmd/crabbox -run Golden -update to create it)", err)
	}
	if diff := cmp.Diff(string(want), got); diff != "" {
		t.Errorf("%s differs from %s (-want +got):\n%s", name, path, diff)
	}
}

// inProcess runs the CLI in this process and returns exit code, stdout and
// stderr.
func inProcess(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	code := Main(context.Background(), args, strings.NewReader(""), &stdout, &stderr)
	return code, stdout.String(), stderr.String()
}

// TestGolden pins the human and JSON output of the commands people and
// agents parse. It runs the CLI in-process against the local provider; the
// warm lease of `run --keep` is served by this test binary as the agent.
func TestGolden(t *testing.T) {
	state, repo := t.TempDir(), gitRepo(t)
	t.Setenv("CRABBOX_STATE_DIR", state)
	t.Setenv("CRABBOX_CONFIG", filepath.Join(t.TempDir(), "none"))
	t.Setenv("CRABBOX_TEST_MAIN", "1")           // for the agent process the test binary starts
	for _, p := range provider.Default().All() { // the same credentials column on every machine
		for _, c := range p.Spec().Credentials {
			for _, k := range c.Env {
				t.Setenv(k, "")
			}
		}
	}
	t.Chdir(repo)
	replace := map[string]string{state: "$STATE", repo: "$REPO"}

	steps := []struct {
		name string
		args []string
	}{
		{"providers", []string{"providers"}},
		{"providers-json", []string{"providers", "--json"}},
		{"providers-describe-ssh", []string{"providers", "describe", "ssh"}},
		{"providers-describe-e2b", []string{"providers", "describe", "e2b"}},
		{"list-empty-json", []string{"list", "--json"}},
		{"sync-plan-json", []string{"sync-plan", "--json"}},
		{"run-keep", []string{"run", "--keep", "--timing-json", "-", "--", "cat", "committed.txt"}},
		{"list", []string{"list"}},
		{"list-json", []string{"list", "--json"}},
		{"history-json", []string{"history", "--json"}},
	}
	var slug string
	for _, step := range steps {
		code, stdout, stderr := inProcess(t, step.args...)
		if code != 0 {
			t.Fatalf("crabbox %v: exit %d, stderr %q", step.args, code, stderr)
		}
		if m := regexp.MustCompile(`\(([a-z]+-[a-z]+(-[0-9a-f]{4})?)[;)]`).FindStringSubmatch(stderr); m != nil && slug == "" {
			slug = m[1]
			replace[slug] = "SLUG"
		}
		golden(t, step.name, normalize("$ crabbox "+strings.Join(step.args, " ")+"\n"+stdout+"--- stderr\n"+stderr, replace))
	}
	if slug == "" {
		t.Fatal("run --keep did not name the kept lease's slug")
	}
	if code, _, stderr := inProcess(t, "stop", slug); code != 0 {
		t.Fatalf("stop: exit %d, stderr %q", code, stderr)
	}
}
