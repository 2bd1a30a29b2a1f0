package crabboxtest

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"

	"github.com/crabbox-dev/crabbox"
)

// fakeM stands for the *testing.M given to Main: its Run is the tests.
type fakeM func() int

func (m fakeM) Run() int { return m() }

func TestMainLeasesOneBoxForTheTests(t *testing.T) {
	state := t.TempDir()
	var box *crabbox.Lease
	var stderr strings.Builder
	code := runMain(fakeM(func() int {
		if box == nil {
			t.Fatal("no box while the tests run")
		}
		if got := Run(t, box, "ls"); !strings.Contains(got, "main_internal_test.go") {
			t.Errorf("ls on the suite's box = %q, want the package directory synced", got)
		}
		if diff := cmp.Diff([]string{"claim " + box.ID(), "local box " + box.ID()}, leftovers(t, state)); diff != "" {
			t.Errorf("while the tests run (-want +got):\n%s", diff)
		}
		return 0
	}), &box, &stderr, inState(state))

	if diff := cmp.Diff([]any{0, ""}, []any{code, stderr.String()}); diff != "" {
		t.Errorf("exit code and stderr (-want +got):\n%s", diff)
	}
	if box != nil {
		t.Errorf("box = %s after the tests, want nil", box.ID())
	}
	if diff := cmp.Diff([]string(nil), leftovers(t, state)); diff != "" {
		t.Errorf("after the tests (-want +got):\n%s", diff)
	}
}

func TestMainRunsInTheSyncedDirectory(t *testing.T) {
	repo := gitRepo(t, map[string]string{"only-in-repo.txt": "from the synced repo\n"})
	var box *crabbox.Lease
	var stderr strings.Builder
	code := runMain(fakeM(func() int {
		if diff := cmp.Diff("from the synced repo\n", Run(t, box, "cat", "only-in-repo.txt")); diff != "" {
			t.Errorf("Run on the suite's box (-want +got):\n%s", diff)
		}
		return 0
	}), &box, &stderr, WithSyncDir(repo))
	if diff := cmp.Diff([]any{0, ""}, []any{code, stderr.String()}); diff != "" {
		t.Errorf("exit code and stderr (-want +got):\n%s", diff)
	}
}

func TestMainExitsWithTheTestsStatus(t *testing.T) {
	var box *crabbox.Lease
	var stderr strings.Builder
	code := runMain(fakeM(func() int { return 3 }), &box, &stderr, WithoutSync())
	if diff := cmp.Diff([]any{3, ""}, []any{code, stderr.String()}); diff != "" {
		t.Errorf("exit code and stderr (-want +got):\n%s", diff)
	}
}

func TestMainRunsNoTestWithoutABox(t *testing.T) {
	var box *crabbox.Lease
	var stderr strings.Builder
	ran := false
	code := runMain(fakeM(func() int { ran = true; return 0 }),
		&box, &stderr, WithClientOptions(crabbox.WithProvider("no-such-provider")))
	if diff := cmp.Diff([]any{1, false}, []any{code, ran}); diff != "" {
		t.Errorf("exit code and whether the tests ran (-want +got):\n%s", diff)
	}
	if want := `crabboxtest: unknown provider "no-such-provider"`; !strings.HasPrefix(stderr.String(), want) {
		t.Errorf("stderr = %q, want it to start with %q", stderr.String(), want)
	}
}

func TestMainFailsWhenTheTestsLeakGoroutines(t *testing.T) {
	var box *crabbox.Lease
	var stderr strings.Builder
	stop := make(chan struct{})
	defer close(stop)
	code := runMain(fakeM(func() int {
		go leakedUntil(stop)
		return 0
	}), &box, &stderr, WithoutSync())
	if code != 1 {
		t.Errorf("exit code = %d, want 1", code)
	}
	for _, want := range []string{"crabboxtest: goroutines left running after the tests passed", "leakedUntil"} {
		if !strings.Contains(stderr.String(), want) {
			t.Errorf("stderr = %q, want it to say %q", stderr.String(), want)
		}
	}
}

func TestMainLeakOptions(t *testing.T) {
	var box *crabbox.Lease
	var stderr strings.Builder
	stop := make(chan struct{})
	defer close(stop)
	code := runMain(fakeM(func() int {
		go leakedUntil(stop)
		return 0
	}), &box, &stderr, WithoutSync(),
		WithLeakOptions(goleak.IgnoreTopFunction("github.com/crabbox-dev/crabbox/crabboxtest.leakedUntil")))
	if diff := cmp.Diff([]any{0, ""}, []any{code, stderr.String()}); diff != "" {
		t.Errorf("exit code and stderr (-want +got):\n%s", diff)
	}
}

// leakedUntil is a goroutine that tests leave running until stop closes.
func leakedUntil(stop <-chan struct{}) { <-stop }
