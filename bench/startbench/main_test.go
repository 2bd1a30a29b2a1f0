package main

import (
	"slices"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestMedian(t *testing.T) {
	for _, c := range []struct {
		in   []int64
		want int64
	}{
		{nil, 0},
		{[]int64{7}, 7},
		{[]int64{9, 1, 5}, 5},
		{[]int64{4, 1, 3, 2}, 2}, // (2+3)/2 in integers
		{[]int64{10, 40, 20, 30}, 25},
		{[]int64{3, 3, 1, 3, 100}, 3},
	} {
		in := slices.Clone(c.in)
		if got := median(c.in); got != c.want {
			t.Errorf("median(%v) = %v, want %v", c.in, got, c.want)
		}
		if !slices.Equal(in, c.in) {
			t.Errorf("median reordered its input: %v, was %v", c.in, in)
		}
	}
	if got, want := median([]time.Duration{4, 1, 3, 2}), time.Duration(2); got != want {
		t.Errorf("median of durations = %v, want %v", got, want)
	}
}

func TestSpans(t *testing.T) {
	ms := func(v ...float64) []time.Duration {
		out := make([]time.Duration, len(v))
		for i, x := range v {
			out[i] = time.Duration(x * float64(time.Millisecond))
		}
		return out
	}
	for _, c := range []struct {
		in   []time.Duration
		want string
	}{
		{nil, "-"},
		{ms(7.14), "7.1 ms (7.1-7.1)"},
		{ms(9, 6.5, 7.1), "7.1 ms (6.5-9.0)"},
		{ms(70, 60, 80, 90), "75.0 ms (60.0-90.0)"},
	} {
		if got := msSpan(c.in); got != c.want {
			t.Errorf("msSpan(%v) = %q, want %q", c.in, got, c.want)
		}
	}
	if got, want := mbSpan([]int64{1_700_000, 1_500_000, 1_600_000}), "1.6 MB (1.5-1.7)"; got != want {
		t.Errorf("mbSpan = %q, want %q", got, want)
	}
	if got, want := mbSpan(nil), "unavailable"; got != want {
		t.Errorf("mbSpan(nil) = %q, want %q", got, want)
	}
}

func TestGoalsMet(t *testing.T) {
	for _, c := range []struct {
		ratio float64
		rss   []int64
		want  string
	}{
		{2.9, []int64{19_000_000}, "wall yes, RSS yes"},
		{3, []int64{19_999_999}, "wall yes, RSS yes"},
		{3.1, []int64{60_000_000}, "wall no, RSS no"},
		{1, []int64{20_000_000}, "wall yes, RSS no"},
		{4, nil, "wall no, RSS unknown"},
	} {
		if got := goalsMet(c.ratio, c.rss); got != c.want {
			t.Errorf("goalsMet(%v, %v) = %q, want %q", c.ratio, c.rss, got, c.want)
		}
	}
}
