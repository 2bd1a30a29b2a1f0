package hexid_test

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/crabbox-dev/crabbox/internal/hexid"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestValid(t *testing.T) {
	for _, tt := range []struct {
		s, prefix string
		n         int
		want      bool
	}{
		{"cbx_0123456789ab", "cbx_", 12, true},
		{"cat_00112233445566778899aabbccddeeff", "cat_", 32, true},
		{"cbx_0123456789AB", "cbx_", 12, false}, // uppercase
		{"cbx_0123456789ag", "cbx_", 12, false}, // not hex
		{"cbx_0123456789a", "cbx_", 12, false},  // short
		{"cbx_0123456789abc", "cbx_", 12, false},
		{"run_0123456789ab", "cbx_", 12, false}, // other prefix
		{"", "cbx_", 12, false},
	} {
		if got := hexid.Valid(tt.s, tt.prefix, tt.n); got != tt.want {
			t.Errorf("Valid(%q, %q, %d) = %v, want %v", tt.s, tt.prefix, tt.n, got, tt.want)
		}
	}
}
