package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/crabbox-dev/crabbox/history"
)

func TestRunJUnit(t *testing.T) {
	t.Parallel()
	env, repo := stateEnv(t), gitRepo(t)
	write := `printf '<testsuite><testcase name="a"/><testcase name="b"><failure/></testcase><testcase name="c"><skipped/></testcase></testsuite>' > good.xml; printf '<testsuite' > broken.xml`
	r := crabboxCmd(t, env, repo, "run", "--junit", "*.xml", "--shell", write)
	if r.code != 0 {
		t.Fatalf("exit %d, stderr %q", r.code, r.stderr)
	}
	for _, want := range []string{"skipped broken.xml", "tests=3 failures=1 errors=0 skipped=1"} {
		if !strings.Contains(r.stderr, want) {
			t.Errorf("stderr %q does not contain %q", r.stderr, want)
		}
	}
	r = crabboxCmd(t, env, repo, "run", "--quiet", "--junit", "*.xml", "--fail-on-test-failures", "--shell", write)
	if r.code != 1 || strings.Contains(r.stderr, "tests=") || !strings.Contains(r.stderr, "skipped broken.xml") {
		t.Errorf("--fail-on-test-failures: exit %d, stderr %q; want exit 1, the broken file reported, no counts", r.code, r.stderr)
	}
}

// --fail-on-test-failures gives a run one exit code: the process status,
// the summary line, --timing-json and history all say 1.
func TestFailOnTestFailuresOneExitCode(t *testing.T) {
	t.Parallel()
	env, repo := stateEnv(t), gitRepo(t)
	file := filepath.Join(t.TempDir(), "timing.json")
	write := `printf '<testsuite><testcase name="a"><failure/></testcase></testsuite>' > r.xml`
	r := crabboxCmd(t, env, repo, "run", "--junit", "r.xml", "--fail-on-test-failures", "--timing-json", file, "--shell", write)
	if r.code != 1 {
		t.Fatalf("exit %d, stderr %q; want 1", r.code, r.stderr)
	}
	lines := strings.Split(strings.TrimSpace(r.stderr), "\n")
	if summary := lines[len(lines)-1]; !strings.HasSuffix(summary, " · exit 1 (tests failed)") {
		t.Errorf("summary line %q, want exit 1 (tests failed)", summary)
	}
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var timing struct {
		RunID       string `json:"runId"`
		ExitCode    int    `json:"exitCode"`
		TestsFailed bool   `json:"testsFailed"`
	}
	if err := json.Unmarshal(data, &timing); err != nil || timing.ExitCode != 1 || !timing.TestsFailed {
		t.Errorf("timing JSON %s (%v), want exitCode 1 and testsFailed", data, err)
	}
	r = crabboxCmd(t, env, repo, "history", "--json")
	var entries []history.Entry
	if err := json.Unmarshal([]byte(r.stdout), &entries); err != nil || len(entries) != 1 {
		t.Fatalf("history --json = %q (%v), want one entry", r.stdout, err)
	}
	if entries[0].RunID != timing.RunID || entries[0].ExitCode != 1 {
		t.Errorf("history entry %+v, want run %s with exit 1", entries[0], timing.RunID)
	}
}
