//go:build unix

package main

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestMedian(t *testing.T) {
	ms := func(v ...int) []time.Duration {
		out := make([]time.Duration, len(v))
		for i, x := range v {
			out[i] = time.Duration(x) * time.Millisecond
		}
		return out
	}
	for _, c := range []struct {
		in   []time.Duration
		want time.Duration
	}{
		{nil, 0},
		{ms(7), 7 * time.Millisecond},
		{ms(9, 1, 5), 5 * time.Millisecond},
		{ms(4, 1, 3, 2), 2500 * time.Microsecond},
	} {
		in := slices.Clone(c.in)
		if got := median(c.in); got != c.want {
			t.Errorf("median(%v) = %v, want %v", c.in, got, c.want)
		}
		if !slices.Equal(in, c.in) {
			t.Errorf("median reordered its input: %v", c.in)
		}
	}
}

func TestPlanTreeDeterministic(t *testing.T) {
	a, b := planTree(500, 42), planTree(500, 42)
	if !slices.Equal(a, b) {
		t.Fatal("planTree differs between calls with the same seed")
	}
	if slices.Equal(a, planTree(500, 43)) {
		t.Fatal("planTree ignores its seed")
	}
	seen := map[string]bool{}
	big := 0
	for _, s := range a {
		if seen[s.Path] {
			t.Fatalf("duplicate path %s", s.Path)
		}
		seen[s.Path] = true
		switch {
		case s.Size >= 1<<20:
			big++
		case s.Size < 1024 || s.Size > 20*1024:
			t.Fatalf("%s: size %d outside 1-20 KB", s.Path, s.Size)
		}
	}
	if big != 1 {
		t.Fatalf("%d MB-sized files in 500, want 1", big)
	}
}

func TestWriteTreeDeterministic(t *testing.T) {
	specs := planTree(40, 7)
	d1, d2 := t.TempDir(), t.TempDir()
	for _, d := range []string{d1, d2} {
		if err := writeTree(t.Context(), d, 7, specs); err != nil {
			t.Fatal(err)
		}
	}
	for _, s := range specs {
		x, err := os.ReadFile(filepath.Join(d1, s.Path))
		if err != nil {
			t.Fatal(err)
		}
		y, err := os.ReadFile(filepath.Join(d2, s.Path))
		if err != nil {
			t.Fatal(err)
		}
		if len(x) != s.Size || !bytes.Equal(x, y) {
			t.Fatalf("%s: contents differ between writes or size %d != %d", s.Path, len(x), s.Size)
		}
	}
}

func TestMutation(t *testing.T) {
	specs := planTree(100, 3)
	m, next := planMutation(specs, 3, 1)
	m2, _ := planMutation(specs, 3, 1)
	if !slices.Equal(m.Changed, m2.Changed) || m.Added != m2.Added || m.Deleted != m2.Deleted {
		t.Fatal("planMutation is not deterministic")
	}
	if len(m.Changed) != 10 || len(next) != len(specs) {
		t.Fatalf("changed %d files, %d -> %d files; want 10 changed and the same count", len(m.Changed), len(specs), len(next))
	}
	if slices.Contains(m.Changed, m.Deleted) || slices.Contains(next, m.Deleted) || !slices.Contains(next, m.Added) {
		t.Fatalf("bad mutation %+v", m)
	}
	root := t.TempDir()
	if err := writeTree(t.Context(), root, 3, specs); err != nil {
		t.Fatal(err)
	}
	changed := filepath.Join(root, m.Changed[0].Path)
	before, _ := os.ReadFile(changed)
	fiBefore, err := os.Stat(changed)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.apply(root, 3, 1); err != nil {
		t.Fatal(err)
	}
	after, _ := os.ReadFile(changed)
	if bytes.Equal(before, after) || len(after) != len(before) {
		t.Fatalf("changed file: %d bytes, was %d, contents equal: %v; want new contents of the same size", len(after), len(before), bytes.Equal(before, after))
	}
	fiAfter, err := os.Stat(changed)
	if err != nil {
		t.Fatal(err)
	}
	if !os.SameFile(fiBefore, fiAfter) {
		t.Fatal("changed file was replaced, want it edited in place")
	}
	if _, err := os.Stat(filepath.Join(root, m.Deleted.Path)); !os.IsNotExist(err) {
		t.Fatalf("deleted file still there: %v", err)
	}
	if _, err := os.Stat(filepath.Join(root, m.Added.Path)); err != nil {
		t.Fatal(err)
	}
}

func TestShellQuote(t *testing.T) {
	for in, want := range map[string]string{"": "''", "a/b-c": "a/b-c", "a b": "'a b'", "it's": `'it'\''s'`} {
		if got := shellQuote(in); got != want {
			t.Errorf("shellQuote(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestParseSizes(t *testing.T) {
	for in, want := range map[string][]int{"": nil, "20000,100000, 200000": {20000, 100000, 200000}, "50,": {50}} {
		got, err := parseSizes(in)
		if err != nil || !slices.Equal(got, want) {
			t.Errorf("parseSizes(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"x", "10", "20000,-1"} {
		if _, err := parseSizes(in); err == nil {
			t.Errorf("parseSizes(%q) succeeded, want an error", in)
		}
	}
}

func TestSpan(t *testing.T) {
	ds := []time.Duration{90 * time.Millisecond, 80 * time.Millisecond, 120 * time.Millisecond}
	if got, want := span(ds), "90ms (80-120)"; got != want {
		t.Errorf("span = %q, want %q", got, want)
	}
	if got, want := rssSpan([]int64{50 << 20, 40 << 20, 60 << 20, 70 << 20}), "55 MB (40-70)"; got != want {
		t.Errorf("rssSpan = %q, want %q", got, want)
	}
}

func TestRotate(t *testing.T) {
	var order []string
	tool := func(name string) func() error {
		return func() error { order = append(order, name); return nil }
	}
	for i := range 3 {
		if err := rotate(i, tool("a"), tool("b")); err != nil {
			t.Fatal(err)
		}
	}
	if want := []string{"a", "b", "b", "a", "a", "b"}; !slices.Equal(order, want) {
		t.Errorf("two tools: order = %v, want %v", order, want)
	}
	order = nil
	for i := range 3 {
		if err := rotate(i, tool("a"), nil, tool("b"), tool("c")); err != nil {
			t.Fatal(err)
		}
	}
	if want := []string{"a", "b", "c", "b", "c", "a", "c", "a", "b"}; !slices.Equal(order, want) {
		t.Errorf("three tools and a nil one: order = %v, want %v", order, want)
	}
	order = nil
	stop := errors.New("stop")
	if err := rotate(0, tool("a"), func() error { return stop }, tool("c")); !errors.Is(err, stop) || !slices.Equal(order, []string{"a"}) {
		t.Errorf("a failing tool: err %v, ran %v; want the error and nothing after it", err, order)
	}
}

func TestPairedRange(t *testing.T) {
	ms := func(v ...int) []time.Duration {
		out := make([]time.Duration, len(v))
		for i, x := range v {
			out[i] = time.Duration(x) * time.Millisecond
		}
		return out
	}
	for _, c := range []struct {
		crabbox, base []time.Duration
		want          string
	}{
		{ms(100, 200, 50), ms(740, 1000, 400), " (5.00-8.00)"},
		{ms(10), ms(25), " (2.50-2.50)"},
		{nil, nil, ""},
		{ms(10, 20), ms(30), ""},
	} {
		if got := pairedRange(c.crabbox, c.base); got != c.want {
			t.Errorf("pairedRange(%v, %v) = %q, want %q", c.crabbox, c.base, got, c.want)
		}
	}
}

func TestStolen(t *testing.T) {
	before := parseCPUTimes("cpu  100 0 50 800 10 0 5 35 0 0\ncpu0 1 2 3\n")
	after := parseCPUTimes("cpu  200 0 100 1500 10 0 15 175 7 0\n")
	if diff := cmp.Diff(cpuTimes{total: 1000, steal: 35, ok: true}, before, cmp.AllowUnexported(cpuTimes{})); diff != "" {
		t.Errorf("parseCPUTimes (-want +got):\n%s", diff)
	}
	// 1000 ticks passed, 140 of them stolen; guest time is not counted twice.
	if got, want := stolen(before, after), "14.0%"; got != want {
		t.Errorf("stolen = %q, want %q", got, want)
	}
	for _, bad := range []string{"", "cpu 1 2 3\n", "intr 5\n", "cpu  1 2 3 4 5 6 7 x\n"} {
		if got := stolen(parseCPUTimes(bad), after); got != "unknown" {
			t.Errorf("stolen from %q = %q, want unknown", bad, got)
		}
	}
}
