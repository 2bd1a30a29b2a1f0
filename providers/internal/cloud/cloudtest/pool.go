package cloudtest

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/crabbox-dev/crabbox/internal/clitest"
)

// CLIPool is the ready pool flow of an end-to-end test of the installed
// crabbox (see InstalledCLI): pool ensure makes one box of the provider
// with flags, run --pool takes it (no "no ready box" notice, the command's
// exit code and output back), a second run --pool finds the pool empty
// and makes its box the ordinary way, and pool drain removes the pool.
// released then checks that nothing billable is left. The installed
// crabbox refills a pool in the background after a take unless
// CRABBOX_POOL_REFILL=0, which run's environment must set, so that no
// process outlives the test.
func CLIPool(t *testing.T, run clitest.Runner, flags []string, released func(t *testing.T)) {
	t.Helper()
	repo := clitest.GitRepo(t)
	cli := func(what string, words int, sub ...string) clitest.Result {
		t.Helper()
		r := run(t, repo, append(append(sub[:words:words], flags...), sub[words:]...)...)
		if r.Code != 0 && what != "" {
			t.Fatalf("%s: exit %d, stdout %q, stderr %q", what, r.Code, r.Stdout, r.Stderr)
		}
		return r
	}
	t.Cleanup(func() { run(t, repo, "pool", "drain", "cloud") })
	cli("pool ensure", 2, "pool", "ensure", "--pool", "cloud", "--size", "1")
	oneShot := []string{"run", "--pool", "cloud", "--", "sh", "-c", "cat committed.txt; exit 7"}
	r := run(t, repo, oneShot...)
	if r.Code != 7 || r.Stdout != "committed\n" || strings.Contains(r.Stderr, "no ready box") {
		t.Errorf("run --pool from a pool of one: exit %d, stdout %q, stderr %q; want 7, the file, the box from the pool", r.Code, r.Stdout, r.Stderr)
	}
	r = run(t, repo, oneShot...)
	if r.Code != 7 || !strings.Contains(r.Stderr, "crabbox: pool cloud had no ready box; acquired one the ordinary way") {
		t.Errorf("run --pool from an empty pool: exit %d, stderr %q; want 7 and the notice", r.Code, r.Stderr)
	}
	cli("pool drain", 2, "pool", "drain", "cloud")
	released(t)
}

// BenchPoolRun times, as whole processes, `crabbox run FLAGS -- true`
// against `crabbox run --pool bench -- true` with the installed crabbox
// at bin (env: its state, PATH and the provider's credentials; flags: the
// provider's), alternating the two runs times each; the pool is refilled
// untimed between its runs. It reports each side's median in ms and the
// ratio of the medians as metrics, and logs the ranges.
func BenchPoolRun(b *testing.B, bin string, env, flags []string, runs int) {
	b.Helper()
	repo := clitest.GitRepo(b)
	env = append(append(os.Environ(), env...), "CRABBOX_POOL_REFILL=0")
	crabbox := func(args ...string) time.Duration {
		b.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), clitest.CallTimeout)
		defer cancel()
		cmd := exec.CommandContext(ctx, filepath.Join(bin, Exe("crabbox")), args...)
		var out bytes.Buffer
		cmd.Dir, cmd.Env, cmd.Stdout, cmd.Stderr = repo, env, &out, &out
		start := time.Now()
		if err := cmd.Run(); err != nil {
			b.Fatalf("crabbox %q: %v\n%s", args, err, out.String())
		}
		return time.Since(start)
	}
	ensure := append(append([]string{"pool", "ensure"}, flags...), "--pool", "bench", "--size", "1")
	b.Cleanup(func() { crabbox("pool", "drain", "bench") })
	fresh := func() time.Duration {
		return crabbox(append(append([]string{"run"}, flags...), "--quiet", "--", "true")...)
	}
	pooled := func() time.Duration {
		d := crabbox("run", "--pool", "bench", "--quiet", "--", "true")
		crabbox(ensure...)
		return d
	}
	crabbox(ensure...)
	fresh() // one of each before the timed runs
	pooled()
	var f, p []time.Duration
	b.ResetTimer()
	for range runs {
		f = append(f, fresh())
		p = append(p, pooled())
	}
	b.StopTimer()
	fm, pm := median(f), median(p)
	b.ReportMetric(float64(fm.Milliseconds()), "fresh-median-ms")
	b.ReportMetric(float64(pm.Milliseconds()), "pool-median-ms")
	b.ReportMetric(float64(pm)/float64(fm), "pool/fresh")
	b.Logf("fresh: median %s, range %s; pool: median %s, range %s (%d runs each)", fm, spread(f), pm, spread(p), runs)
}

func median(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[(len(s)-1)/2]
}

func spread(ds []time.Duration) string {
	return fmt.Sprintf("%s-%s", slices.Min(ds).Round(time.Millisecond), slices.Max(ds).Round(time.Millisecond))
}
