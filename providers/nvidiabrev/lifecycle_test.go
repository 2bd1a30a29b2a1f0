package nvidiabrev

import (
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/crabbox-dev/crabbox/provider"
	"github.com/crabbox-dev/crabbox/providers/internal/cloud/cloudtest"
	"github.com/crabbox-dev/crabbox/providers/internal/tagcloud/tagcloudtest"
	"github.com/crabbox-dev/crabbox/providers/nvidiabrev/internal/fakebrev"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const (
	testKey = "bak-0123456789abcdefTESTKEY"
	testOrg = "org-2fXk9Lm3"
)

var (
	sizes   = [2]string{"a100-80gb-1x", "a100-40gb-1x"}
	regions = [2]string{"wg-east", "wg-west"}
)

// fakeTypes are the fake's instance types: the two sizes (A100, in both
// groups), a cheaper A100 and an H100 pair in the first group only.
func fakeTypes() []fakebrev.InstanceType {
	return []fakebrev.InstanceType{
		{Type: sizes[0], GPU: "A100", GPUCount: 1, Price: "1.89", Groups: regions[:]},
		{Type: sizes[1], GPU: "A100", GPUCount: 1, Price: "1.49", Groups: regions[:]},
		{Type: "h100-2x", GPU: "H100", GPUCount: 2, Price: "5.98", Groups: regions[:1]},
		{Type: "cpu-8x32", Price: "0.20", Groups: regions[:1]},
	}
}

// env is a fake Brev organization and backends on it.
type env struct {
	*tagcloudtest.Env
	fake  *fakebrev.Server
	cloud *tagcloudtest.FakeCloud

	mu       sync.Mutex
	attempts []string
}

// newEnv serves a fake Brev API (with faults) whose instances are real
// SSH boxes of fleet. Its backends try the two sizes and groups with the
// GPU class 1x A100, and no retries.
func newEnv(t *testing.T, fleet *cloudtest.Fleet, edit func(*Config)) *env {
	cloud := tagcloudtest.NewFakeCloudOf(fleet)
	e := &env{cloud: cloud}
	e.fake = fakebrev.New(cloud, testKey, testOrg, fakeTypes()...)
	faults := &tagcloudtest.Faults{Op: fakebrev.Op, Body: func(status int) string { return fakebrev.ErrorBody("fake " + http.StatusText(status)) }}
	e.Env = tagcloudtest.NewEnv(t, cloud, faults, e.fake, sizes, regions, func(a tagcloudtest.BackendArgs) (provider.SSHLeaseBackend, error) {
		cfg := Config{
			APIKey: testKey, Org: testOrg, Options: a.Options, GPU: "A100", GPUCount: 1,
			MapAddress: a.MapAddress, PollInterval: a.PollInterval, CallTimeout: time.Minute, NoRetries: true,
			onAttempt: e.attempt,
		}
		if edit != nil {
			edit(&cfg)
		}
		return New(cfg, a.Runtime)
	})
	e.Creates = e.Attempts
	e.Full = e.fake.SetFull
	return e
}

func (e *env) attempt(size, region string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.attempts = append(e.attempts, size+"/"+region)
}

// Attempts are the "size/region" of every create attempt, in order.
func (e *env) Attempts() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.Clone(e.attempts)
}

// TestTagCloud runs the tag cloud suites against the fake Brev API:
// rollback of every acquire step (the call fails, hangs, or succeeds with
// its answer lost), the instance type and workspace group fallback when
// Brev lists no capacity, a killed acquire cleaned up only with the
// claim and after the grace period, and the SSH-lease conformance suite
// (the fake's instances are real SSH boxes).
func TestTagCloud(t *testing.T) {
	tagcloudtest.Run(t, tagcloudtest.Harness{NewEnv: func(t *testing.T) *tagcloudtest.Env {
		return newEnv(t, cloudtest.NewFleet(t), nil).Env
	}})
}

func release(t *testing.T, b provider.SSHLeaseBackend, target provider.LeaseTarget) {
	t.Helper()
	if err := b.ReleaseLease(t.Context(), provider.ReleaseRequest{Lease: target}); err != nil {
		t.Fatal(err)
	}
}
