package main

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestLoadRunsEveryOperation(t *testing.T) {
	cfg := config{clients: []int{1, 3}, iterations: 6, maxDuration: time.Minute, heartbeats: 2, events: 2}
	results, err := run(t.Context(), cfg, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	if len(results) != 2*len(ops) {
		t.Fatalf("got %d results, want %d", len(results), 2*len(ops))
	}
	want := map[string]int{"create": 6, "heartbeat": 12, "run": 6, "event": 12, "finish": 6, "release": 6, "all": 48}
	for _, r := range results {
		if r.Errors != 0 || r.Count != want[r.Op] || r.P50Ms <= 0 || r.P99Ms < r.P50Ms {
			t.Errorf("%+v: want %d operations without errors", r, want[r.Op])
		}
	}
	var out bytes.Buffer
	printTable(&out, results)
	if !strings.Contains(out.String(), "p99 ms") || strings.Count(out.String(), "\n") != len(results)+1 {
		t.Errorf("table:\n%s", out.String())
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
