package main

import (
	"strings"
	"testing"
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
