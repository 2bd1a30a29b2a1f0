package quickstart

import (
	"runtime"
	"runtime/debug"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// Through the window the collector is off, the heap bounded by StartLimit
// and there is one P more than before; after it, all is as it was.
func TestDoneTunesTheStartWindowOnly(t *testing.T) {
	procs := runtime.GOMAXPROCS(0)
	limit := debug.SetMemoryLimit(-1)
	var window time.Duration
	var end func()
	done(func(d time.Duration, f func()) { window, end = d, f })

	if window != Window {
		t.Errorf("window = %v, want %v", window, Window)
	}
	if got := runtime.GOMAXPROCS(0); got != procs+1 {
		t.Errorf("GOMAXPROCS in the window = %d, want %d", got, procs+1)
	}
	if got := debug.SetMemoryLimit(-1); got != min(limit, StartLimit) {
		t.Errorf("memory limit in the window = %d, want %d", got, min(limit, StartLimit))
	}
	if got := debug.SetGCPercent(-1); got != -1 {
		t.Errorf("GC percent in the window = %d, want -1 (off)", got)
	}

	end()
	if got := runtime.GOMAXPROCS(0); got != procs {
		t.Errorf("GOMAXPROCS after the window = %d, want %d", got, procs)
	}
	if got := debug.SetMemoryLimit(-1); got != limit {
		t.Errorf("memory limit after the window = %d, want %d", got, limit)
	}
	if got := debug.SetGCPercent(percent); got != percent {
		t.Errorf("GC percent after the window = %d, want %d", got, percent)
	}
}
