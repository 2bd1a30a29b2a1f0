package cloud

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestBackoff(t *testing.T) {
	ms := time.Millisecond
	tests := []struct {
		interval time.Duration
		want     []time.Duration
	}{
		{2 * time.Second, []time.Duration{250 * ms, 500 * ms, time.Second, 2 * time.Second, 2 * time.Second}},
		{600 * ms, []time.Duration{250 * ms, 500 * ms, 600 * ms, 600 * ms}},
		{100 * ms, []time.Duration{100 * ms, 100 * ms}},
		{0, []time.Duration{250 * ms, 250 * ms}},
	}
	for _, tt := range tests {
		b := NewBackoff(tt.interval)
		var got []time.Duration
		for range tt.want {
			got = append(got, b.Next())
		}
		if diff := cmp.Diff(tt.want, got); diff != "" {
			t.Errorf("NewBackoff(%s) pauses (-want +got):\n%s", tt.interval, diff)
		}
	}
}
