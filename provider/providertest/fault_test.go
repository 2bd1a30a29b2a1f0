package providertest_test

import (
	"context"
	"errors"
	"testing"

	"go.uber.org/goleak"

	"github.com/crabbox-dev/crabbox/provider"
	"github.com/crabbox-dev/crabbox/provider/providertest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// counting is a backend that counts acquires and releases.
type counting struct {
	provider.SSHLeaseBackend // unused methods panic
	acquired, released       int
}

func (c *counting) Acquire(context.Context, provider.AcquireRequest) (provider.LeaseTarget, error) {
	c.acquired++
	return provider.LeaseTarget{LeaseID: "cbx_000000000001"}, nil
}

func (c *counting) ReleaseLease(context.Context, provider.ReleaseRequest) error {
	c.released++
	return nil
}

func TestFaults(t *testing.T) {
	ctx := context.Background()
	boom := errors.New("boom")

	b := &counting{}
	f := providertest.WithFaults(b, providertest.Fault{Step: providertest.StepAcquire, Err: boom, Times: 1})
	if _, err := f.Acquire(ctx, provider.AcquireRequest{}); !errors.Is(err, boom) || b.acquired != 0 {
		t.Errorf("first acquire: err %v, %d real calls; want boom before the call", err, b.acquired)
	}
	if _, err := f.Acquire(ctx, provider.AcquireRequest{}); err != nil || b.acquired != 1 {
		t.Errorf("second acquire: err %v, %d real calls; want the fault spent", err, b.acquired)
	}

	b = &counting{}
	f = providertest.WithFaults(b, providertest.Fault{Step: providertest.StepRelease, AfterCall: true})
	if err := f.ReleaseLease(ctx, provider.ReleaseRequest{}); !errors.Is(err, providertest.ErrInjected) || !errors.Is(err, provider.ErrTransient) || b.released != 1 {
		t.Errorf("release after call: err %v, %d real calls; want ErrInjected after the call", err, b.released)
	}

	b = &counting{}
	hctx, cancel := context.WithCancel(ctx)
	defer cancel()
	f = providertest.WithFaults(b, providertest.Fault{Step: providertest.StepAcquire, Hang: true, AfterCall: true, OnHang: cancel})
	if _, err := f.Acquire(hctx, provider.AcquireRequest{}); !errors.Is(err, context.Canceled) || b.acquired != 1 {
		t.Errorf("hang after call: err %v, %d real calls; want context.Canceled after the call", err, b.acquired)
	}
}
