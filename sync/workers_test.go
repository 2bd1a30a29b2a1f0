package sync

import (
	"context"
	"errors"
	gosync "sync"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestForEach(t *testing.T) {
	for _, n := range []int{0, 1, 255, 256, 257, 3000} {
		var mu gosync.Mutex
		seen := make([]int, n)
		err := forEach(t.Context(), n, 256, func(w, i int) error {
			if w < 0 || w >= scanWorkers() {
				t.Errorf("worker %d out of range", w)
			}
			mu.Lock()
			seen[i]++
			mu.Unlock()
			return nil
		})
		if err != nil {
			t.Fatalf("n=%d: %v", n, err)
		}
		want := make([]int, n)
		for i := range want {
			want[i] = 1
		}
		if diff := cmp.Diff(want, seen); diff != "" {
			t.Errorf("n=%d: calls per index (-want +got):\n%s", n, diff)
		}
	}

	boom := errors.New("boom")
	calls := 0
	err := forEach(t.Context(), 1000, 1000, func(_, i int) error {
		calls++
		if i == 10 {
			return boom
		}
		return nil
	})
	if !errors.Is(err, boom) || calls != 11 {
		t.Errorf("forEach stopping at index 10: %v after %d calls, want boom after 11", err, calls)
	}

	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if err := forEach(ctx, 10, 1, func(int, int) error {
		t.Error("fn called after cancellation")
		return nil
	}); !errors.Is(err, context.Canceled) {
		t.Errorf("forEach on a cancelled context = %v", err)
	}
}
