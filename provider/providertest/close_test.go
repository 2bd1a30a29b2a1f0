package providertest_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"

	"go.uber.org/goleak"

	"github.com/crabbox-dev/crabbox/provider"
	"github.com/crabbox-dev/crabbox/provider/providertest"
)

// serving is a backend that serves each lease from a goroutine of its
// own, as an in-process box would.
type serving struct {
	provider.SSHLeaseBackend // unused methods panic
	stop                     chan struct{}
	wg                       sync.WaitGroup
}

func newServing() *serving { return &serving{stop: make(chan struct{})} }

func (s *serving) Spec() provider.Spec { return provider.Spec{Name: "serving"} }

func (s *serving) Acquire(_ context.Context, req provider.AcquireRequest) (provider.LeaseTarget, error) {
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		<-s.stop
	}()
	return provider.LeaseTarget{LeaseID: req.LeaseID}, nil
}

// shutdown ends the lease goroutines and waits for them.
func (s *serving) shutdown() {
	select {
	case <-s.stop:
	default:
		close(s.stop)
	}
	s.wg.Wait()
}

// closing stops its goroutines on Close, as the contract asks.
type closing struct{ *serving }

func (c closing) Close() error { c.shutdown(); return nil }

// closingNothing has a Close that forgets the lease goroutines.
type closingNothing struct{ *serving }

func (closingNothing) Close() error { return nil }

// recorder is a testing.TB that records failures instead of failing.
type recorder struct {
	testing.TB // unused methods panic
	errors     []string
}

func (r *recorder) Helper() {}
func (r *recorder) Errorf(format string, args ...any) {
	r.errors = append(r.errors, fmt.Sprintf(format, args...))
}

// TestCheckClosed: the conformance suite's Close check fails a backend
// whose goroutines outlive Close, whether it has no Close at all or one
// that leaves them running, and passes one whose Close stops them.
func TestCheckClosed(t *testing.T) {
	tests := []struct {
		name    string
		backend func(*serving) provider.Backend
		want    string // in the failure; empty for none
	}{
		{name: "no Close", backend: func(s *serving) provider.Backend { return s }, want: "does not implement io.Closer"},
		{name: "Close leaves goroutines", backend: func(s *serving) provider.Backend { return closingNothing{s} }, want: "left goroutines running after Close"},
		{name: "Close stops goroutines", backend: func(s *serving) provider.Backend { return closing{s} }},
		{name: "wrapped in faults", backend: func(s *serving) provider.Backend { return providertest.WithFaults(closing{s}) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := goleak.IgnoreCurrent()
			s := newServing()
			defer s.shutdown() // so that the package's goleak check passes
			b := tt.backend(s)
			for range 2 {
				if _, err := b.(provider.SSHLeaseBackend).Acquire(t.Context(), provider.AcquireRequest{LeaseID: "cbx_000000000001"}); err != nil {
					t.Fatal(err)
				}
			}
			var rec recorder
			providertest.CheckClosed(&rec, b, before)
			switch {
			case tt.want == "" && len(rec.errors) != 0:
				t.Errorf("CheckClosed failed a backend that stops everything on Close: %q", rec.errors)
			case tt.want != "" && (len(rec.errors) != 1 || !strings.Contains(rec.errors[0], tt.want)):
				t.Errorf("CheckClosed errors = %q, want one saying %q", rec.errors, tt.want)
			}
		})
	}
}
