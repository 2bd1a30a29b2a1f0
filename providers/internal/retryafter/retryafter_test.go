package retryafter_test

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"

	"github.com/crabbox-dev/crabbox/providers/internal/retryafter"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestParse(t *testing.T) {
	now := time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)
	type result struct {
		D  time.Duration
		OK bool
	}
	for v, want := range map[string]result{
		"":                              {0, false},
		"  ":                            {0, false},
		"7":                             {7 * time.Second, true},
		" 0 ":                           {0, true},
		"-3":                            {0, false},
		"soon":                          {0, false},
		"1.5":                           {0, false},
		"Mon, 07 Dec 2026 12:00:30 GMT": {30 * time.Second, true},
		"Mon, 07 Dec 2026 11:59:00 GMT": {0, true}, // already past
	} {
		d, ok := retryafter.Parse(v, now)
		if diff := cmp.Diff(want, result{d, ok}); diff != "" {
			t.Errorf("Parse(%q) (-want +got):\n%s", v, diff)
		}
	}
}
