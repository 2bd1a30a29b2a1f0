package main

import (
	"bytes"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestStatusLineQuietWhenPiped(t *testing.T) {
	var buf bytes.Buffer
	s := &statusLine{w: &buf}
	if s.syncProgress() != nil {
		t.Fatal("progress callback on a non-terminal")
	}
	s.clear()
	if _, err := s.before(&buf).Write([]byte("out\n")); err != nil {
		t.Fatal(err)
	}
	if got := buf.String(); got != "out\n" {
		t.Errorf("piped output = %q, want only the command's output", got)
	}
}

func TestStatusLineClearedBeforeOutput(t *testing.T) {
	var term bytes.Buffer
	s := &statusLine{w: &term, shown: true}
	if _, err := s.before(&term).Write([]byte("out\n")); err != nil {
		t.Fatal(err)
	}
	if got, want := term.String(), "\r\033[Kout\n"; got != want {
		t.Errorf("output = %q, want the status line cleared first (%q)", got, want)
	}
}

// Progress shows files, bytes and the rate since the first report, at most
// ten times a second.
func TestStatusLineShowsRate(t *testing.T) {
	var term bytes.Buffer
	clock := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	s := &statusLine{w: &term, now: func() time.Time { return clock }}
	var got []string
	for _, step := range []struct {
		after time.Duration
		files int
		bytes int64
	}{
		{0, 1, 1 << 20},                      // the first report: no rate yet
		{50 * time.Millisecond, 2, 2 << 20},  // too soon: not shown
		{450 * time.Millisecond, 5, 5 << 20}, // 4 MiB in 0.5 s
		{time.Second, 9, 11 << 20},           // 10 MiB in 1.5 s
	} {
		clock = clock.Add(step.after)
		s.update(step.files, step.bytes)
		got = append(got, term.String())
		term.Reset()
	}
	want := []string{
		"\r\033[Ksyncing: 1 files, 1.0 MiB",
		"",
		"\r\033[Ksyncing: 5 files, 5.0 MiB, 8.0 MiB/s",
		"\r\033[Ksyncing: 9 files, 11.0 MiB, 6.7 MiB/s",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("status line (-want +got):\n%s", diff)
	}
	if !s.shown {
		t.Error("status line not marked shown")
	}
}
