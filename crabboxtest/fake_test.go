package crabboxtest

import (
	"fmt"
	"runtime"
	gosync "sync"
	"testing"
)

// fakeT is a testing.TB that records failures instead of failing the real
// test it wraps (which still provides Context, TempDir, Cleanup and Log).
// Fatal ends the calling goroutine, as it does for a real test: call the
// code under test through fakeT.do.
type fakeT struct {
	testing.TB
	mu     gosync.Mutex
	fatal  []string
	errors []string
}

func newFakeT(t *testing.T) *fakeT { return &fakeT{TB: t} }

// do runs body as a test body, on a goroutine of its own.
func (f *fakeT) do(body func(t testing.TB)) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		body(f)
	}()
	<-done
}

func (f *fakeT) Helper() {}

func (f *fakeT) Fatal(args ...any) { f.Fatalf("%s", fmt.Sprint(args...)) }

func (f *fakeT) Fatalf(format string, args ...any) {
	f.mu.Lock()
	f.fatal = append(f.fatal, fmt.Sprintf(format, args...))
	f.mu.Unlock()
	runtime.Goexit()
}

func (f *fakeT) Error(args ...any) { f.Errorf("%s", fmt.Sprint(args...)) }

func (f *fakeT) Errorf(format string, args ...any) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.errors = append(f.errors, fmt.Sprintf(format, args...))
}

// failures are the messages of the Fatal and Error calls so far.
func (f *fakeT) failures() (fatal, errors []string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.fatal...), append([]string(nil), f.errors...)
}
