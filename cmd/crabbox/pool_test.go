package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/crabbox-dev/crabbox"
)

// TestPoolEndToEnd drives ready pools through the crabbox binary (this
// test binary) on the local provider, whose pool boxes are served by
// agent processes: ensure, run --pool and warmup --pool taking a box at
// once, the background refill, a miss, list and drain.
func TestPoolEndToEnd(t *testing.T) {
	env, repo := stateEnv(t), gitRepo(t)
	env = append(env, envPoolRefill+"=1")
	cli := func(args ...string) result {
		t.Helper()
		r := crabboxCmd(t, env, repo, args...)
		if r.code != 0 {
			t.Fatalf("crabbox %v: exit %d, stderr %q", args, r.code, r.stderr)
		}
		return r
	}
	t.Cleanup(func() {
		crabboxCmd(t, env, repo, "pool", "drain", "e2e")
		crabboxCmd(t, env, repo, "pool", "drain", "empty")
	})
	var info crabbox.PoolInfo
	if err := json.Unmarshal([]byte(cli("pool", "ensure", "--pool", "e2e", "--size", "2", "--max-age", "30m", "--json").stdout), &info); err != nil {
		t.Fatal(err)
	}
	if info.Key != "e2e" || info.Provider != "local" || info.Ready != 2 || info.Made != 2 || info.MaxAgeSeconds != 1800 {
		t.Fatalf("pool ensure = %+v", info)
	}
	if out := cli("list").stdout; strings.Count(out, "ready (idle in pool e2e)") != 2 {
		t.Errorf("list shows the idle pool boxes as:\n%s", out)
	}

	// run --pool takes a box at once, and refills the pool in the
	// background; the synchronous refill after it waits for that one.
	timing := filepath.Join(t.TempDir(), "timing.json")
	r := cli("run", "--pool", "e2e", "--timing-json", timing, "--", "sh", "-c", "cat committed.txt")
	if r.stdout != "committed\n" || strings.Contains(r.stderr, "no ready box") {
		t.Fatalf("run --pool: stdout %q, stderr %q", r.stdout, r.stderr)
	}
	var tj struct {
		Pool *crabbox.LeasePool `json:"pool"`
	}
	b, err := os.ReadFile(timing)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &tj); err != nil || tj.Pool == nil || tj.Pool.Key != "e2e" || !tj.Pool.Hit {
		t.Fatalf("timing JSON %s: pool %+v, %v", b, tj.Pool, err)
	}
	if err := json.Unmarshal([]byte(cli("pool", "ensure", "--pool", "e2e", "--json").stdout), &info); err != nil || info.Ready != 2 {
		t.Fatalf("pool ensure --pool e2e (refill) = %+v, %v", info, err)
	}

	// warmup --pool: a kept lease from the pool.
	var warm crabbox.LeaseInfo
	if err := json.Unmarshal([]byte(cli("warmup", "--pool", "e2e", "--json").stdout), &warm); err != nil {
		t.Fatal(err)
	}
	if warm.Pool == nil || warm.Pool.Key != "e2e" || !warm.Pool.Hit || !warm.Keep {
		t.Fatalf("warmup --pool = %+v (pool %+v)", warm, warm.Pool)
	}
	cli("stop", warm.ID)

	// A pool with no box: the run says so and acquires the ordinary way.
	cli("pool", "ensure", "--pool", "empty", "--size", "0")
	r = cli("run", "--pool", "empty", "--timing-json", timing, "--", "true")
	if !strings.Contains(r.stderr, "crabbox: pool empty had no ready box; acquired one the ordinary way") {
		t.Errorf("run --pool of an empty pool: stderr %q", r.stderr)
	}
	if b, _ := os.ReadFile(timing); !bytes.Contains(b, []byte(`"pool":{"key":"empty","hit":false}`)) {
		t.Errorf("timing JSON of a miss: %s", b)
	}

	var pools []crabbox.PoolInfo
	if err := json.Unmarshal([]byte(cli("pool", "list", "--json").stdout), &pools); err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, p := range pools {
		keys = append(keys, p.Key)
	}
	if diff := cmp.Diff([]string{"e2e", "empty"}, keys); diff != "" {
		t.Errorf("pool list (-want +got):\n%s", diff)
	}
	if out := cli("pool", "drain", "e2e").stdout; !strings.HasPrefix(out, "drained e2e: ") {
		t.Errorf("pool drain: %q", out)
	}
	cli("pool", "drain", "empty")
	if r := cli("list", "--json"); strings.TrimSpace(r.stdout) != "[]" {
		t.Errorf("leases left after drain: %s", r.stdout)
	}
}

func TestPoolBadInput(t *testing.T) {
	t.Parallel()
	env, repo := stateEnv(t), gitRepo(t)
	for _, tt := range []struct {
		args     []string
		code     int
		inStderr string
	}{
		{[]string{"run", "--pool", "nope", "--", "true"}, 125, "no such pool"},
		{[]string{"run", "--pool", "x", "--id", "y", "--", "true"}, 2, "--id and --from do not go with it"},
		{[]string{"warmup", "--pool", "x", "--from", "y"}, 2, "give one"},
		{[]string{"pool", "ensure", "--pool", "Bad_Key", "--size", "1"}, 125, `ready pool key "Bad_Key" is malformed`},
		{[]string{"pool", "ensure", "--size", "-1"}, 2, "--size must not be negative"},
		{[]string{"pool", "ensure"}, 2, "give --size N"},
		{[]string{"pool", "ensure", "--pool", "nope"}, 125, "not found"},
		{[]string{"pool", "drain", "nope"}, 125, "not found"},
		{[]string{"pool", "drain", "a", "b"}, 2, "at most one pool key"},
	} {
		r := crabboxCmd(t, env, repo, tt.args...)
		if r.code != tt.code || !strings.Contains(r.stderr, tt.inStderr) {
			t.Errorf("crabbox %v: exit %d, stderr %q; want exit %d with %q", tt.args, r.code, r.stderr, tt.code, tt.inStderr)
		}
	}
	if r := crabboxCmd(t, env, repo, "pool", "list", "--json"); strings.TrimSpace(r.stdout) != "[]" {
		t.Errorf("pool list after bad input: %q", r.stdout)
	}
}

// After run --pool asked a local pool for a box, the CLI starts
// `crabbox pool ensure --pool KEY` in the background.
func TestRunPoolStartsRefill(t *testing.T) {
	state, repo := t.TempDir(), gitRepo(t)
	t.Setenv("CRABBOX_STATE_DIR", state)
	t.Setenv("CRABBOX_CONFIG", filepath.Join(t.TempDir(), "none"))
	t.Setenv(envPoolRefill, "1")
	t.Setenv("CRABBOX_TEST_MAIN", "1") // for the agent process the test binary starts
	t.Chdir(repo)
	var started [][]string
	run := func(args ...string) (int, string) {
		var stdout, stderr bytes.Buffer
		a := &app{stdin: strings.NewReader(""), stdout: &stdout, stderr: &stderr,
			startRefill: func(args []string, logFile string) error {
				if filepath.Dir(logFile) != filepath.Join(state, "pools") {
					t.Errorf("refill log %s, want it in %s/pools", logFile, state)
				}
				started = append(started, args)
				return nil
			}}
		return a.program().Main(context.Background(), args, &stdout, &stderr), stderr.String()
	}
	// An empty pool: the run is a miss, and the pool is refilled all the
	// same (it may be short of boxes).
	if code, stderr := run("pool", "ensure", "--pool", "p", "--size", "0"); code != 0 {
		t.Fatalf("pool ensure: exit %d, %s", code, stderr)
	}
	if code, stderr := run("run", "--pool", "p", "--", "true"); code != 0 {
		t.Fatalf("run --pool: exit %d, %s", code, stderr)
	}
	want := [][]string{{"pool", "ensure", "--pool", "p"}}
	if diff := cmp.Diff(want, started); diff != "" {
		t.Errorf("refills started (-want +got):\n%s", diff)
	}
	cfg := filepath.Join(t.TempDir(), "config")
	if err := os.WriteFile(cfg, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if code, stderr := run("run", "--config", cfg, "--pool", "p", "--", "true"); code != 0 {
		t.Fatalf("run --pool: exit %d, %s", code, stderr)
	}
	want = append(want, []string{"pool", "ensure", "--pool", "p", "--config", cfg})
	if diff := cmp.Diff(want, started); diff != "" {
		t.Errorf("refills started with --config (-want +got):\n%s", diff)
	}
	if code, stderr := run("pool", "drain", "p"); code != 0 {
		t.Fatalf("pool drain: exit %d, %s", code, stderr)
	}
}

// Processes racing for a pool's boxes: each box goes to exactly one.
func TestPoolTakenOnceAcrossProcesses(t *testing.T) {
	env, repo := stateEnv(t), gitRepo(t)
	if r := crabboxCmd(t, env, repo, "pool", "ensure", "--pool", "race", "--size", "2"); r.code != 0 {
		t.Fatalf("pool ensure: exit %d, stderr %q", r.code, r.stderr)
	}
	t.Cleanup(func() { crabboxCmd(t, env, repo, "pool", "drain", "race") })
	const takers = 5
	results := make([]result, takers)
	done := make(chan int)
	for i := range takers {
		go func() {
			results[i] = crabboxCmd(t, env, repo, "warmup", "--pool", "race", "--json")
			done <- i
		}()
	}
	for range takers {
		<-done
	}
	hits := map[string]bool{}
	for _, r := range results {
		var info crabbox.LeaseInfo
		if err := json.Unmarshal([]byte(r.stdout), &info); r.code != 0 || err != nil {
			t.Fatalf("warmup --pool: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
		}
		t.Cleanup(func() { crabboxCmd(t, env, repo, "stop", info.ID) })
		if info.Pool == nil || info.Pool.Key != "race" {
			t.Fatalf("warmup --pool: pool %+v", info.Pool)
		}
		if info.Pool.Hit {
			if hits[info.ID] {
				t.Errorf("box %s handed out twice", info.ID)
			}
			hits[info.ID] = true
		}
	}
	if len(hits) != 2 {
		t.Errorf("%d boxes taken from the pool of 2, want 2", len(hits))
	}
}
