package main

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestLoadRunsEveryOperation(t *testing.T) {
	cfg := config{scenario: "full", runs: 2, clients: []int{1, 3}, iterations: 6, maxDuration: time.Minute, heartbeats: 2, events: 2}
	results, err := run(t.Context(), cfg, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	if len(results) != 2*len(ops) {
		t.Fatalf("got %d results, want %d", len(results), 2*len(ops))
	}
	want := map[string]int{"create": 6, "heartbeat": 12, "run": 6, "event": 12, "finish": 6, "release": 6, "all": 48}
	for _, r := range results {
		if r.Errors != 0 || r.Runs != 2 || r.Count != 2*want[r.Op] || r.P50Ms.Min <= 0 || r.P99Ms.Median < r.P50Ms.Median ||
			r.PerSecond.Min > r.PerSecond.Median || r.PerSecond.Median > r.PerSecond.Max {
			t.Errorf("%+v: want %d operations in each of 2 runs without errors", r, want[r.Op])
		}
	}
	if _, ok := cpuTime(); ok {
		for _, r := range results {
			if r.Op == "all" && r.CPUMsPerOp.Min <= 0 {
				t.Errorf("%+v: no CPU time per operation", r)
			}
		}
	}
	var out bytes.Buffer
	printTable(&out, results)
	if !strings.Contains(out.String(), "p99 ms") || strings.Count(out.String(), "\n") != len(results)+1 {
		t.Errorf("table:\n%s", out.String())
	}
}

func TestScenarios(t *testing.T) {
	for _, tc := range []struct {
		scenario string
		want     map[string]int
	}{
		{"heartbeat", map[string]int{"heartbeat": 10, "all": 10}},
		{"lease", map[string]int{"create": 10, "release": 10, "all": 20}},
	} {
		t.Run(tc.scenario, func(t *testing.T) {
			cfg := config{scenario: tc.scenario, runs: 1, clients: []int{3}, iterations: 10, maxDuration: time.Minute}
			results, err := run(t.Context(), cfg, &bytes.Buffer{})
			if err != nil {
				t.Fatal(err)
			}
			got := map[string]int{}
			for _, r := range results {
				if r.Errors != 0 {
					t.Errorf("%+v: errors", r)
				}
				got[r.Op] = r.Count
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("operations (-want +got):\n%s", diff)
			}
		})
	}
}

func TestSpread(t *testing.T) {
	for _, tc := range []struct {
		in   []float64
		want Spread
	}{
		{nil, Spread{}},
		{[]float64{3}, Spread{3, 3, 3}},
		{[]float64{5, 1, 3}, Spread{3, 1, 5}},
		{[]float64{4, 1, 2, 10}, Spread{3, 1, 10}},
	} {
		if got := spread(tc.in); got != tc.want {
			t.Errorf("spread(%v) = %+v, want %+v", tc.in, got, tc.want)
		}
	}
	if got := (Spread{5100, 4900, 5300}).format("%.0f"); got != "5100 (4900-5300)" {
		t.Errorf("format = %q", got)
	}
}

func TestParseClients(t *testing.T) {
	if got, err := parseClients("1, 10,100"); err != nil || len(got) != 3 || got[2] != 100 {
		t.Errorf("parseClients = %v, %v", got, err)
	}
	for _, bad := range []string{"", "0", "x", "1,,2", "5000"} {
		if _, err := parseClients(bad); err == nil {
			t.Errorf("parseClients(%q) accepted", bad)
		}
	}
}
