package tensorlake

import (
	"net/http"
	"testing"
	"time"
)

func TestRetryWait(t *testing.T) {
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		header  string
		attempt int
		want    time.Duration
	}{
		{"", 1, time.Second}, {"", 3, 4 * time.Second}, {"", 20, maxRetryWait},
		{"5", 1, 5 * time.Second}, {"0", 2, 0}, {"3600", 1, maxRetryWait},
		{now.Add(9 * time.Second).Format(http.TimeFormat), 1, 9 * time.Second},
		{now.Add(-time.Minute).Format(http.TimeFormat), 1, 0},
		{"soon", 2, 2 * time.Second},
	} {
		h := http.Header{}
		if tc.header != "" {
			h.Set("Retry-After", tc.header)
		}
		if got := retryWait(h, tc.attempt, now); got != tc.want {
			t.Errorf("retryWait(Retry-After %q, attempt %d) = %v, want %v", tc.header, tc.attempt, got, tc.want)
		}
	}
}

func TestLineWriter(t *testing.T) {
	var b []byte
	w := newLineWriter(writerFunc(func(p []byte) { b = append(b, p...) }), "M")
	for _, l := range []string{"a", "", "b", "", "M", "late"} {
		w.line(l)
	}
	if string(b) != "a\n\nb\n" {
		t.Errorf("lines a, \"\", b, \"\", marker = %q, want %q", b, "a\n\nb\n")
	}
}

type writerFunc func([]byte)

func (f writerFunc) Write(p []byte) (int, error) { f(p); return len(p), nil }
