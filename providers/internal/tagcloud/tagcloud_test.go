package tagcloud_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/jonboulle/clockwork"
	"go.uber.org/goleak"

	"github.com/crabbox-dev/crabbox/provider"
	"github.com/crabbox-dev/crabbox/providers/internal/cloud"
	"github.com/crabbox-dev/crabbox/providers/internal/tagcloud"
	"github.com/crabbox-dev/crabbox/providers/internal/tagcloud/tagcloudtest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// memAPI is a tag cloud in memory whose calls of one kind can hang until
// their context ends, after doing their work (the answer is lost).
type memAPI struct {
	mu       sync.Mutex
	next     int
	machines map[string]tagcloud.Machine
	hang     string // "create", "get", "delete": that call never answers
	hung     []string
}

func (a *memAPI) wait(ctx context.Context, op string) error {
	a.mu.Lock()
	hang := a.hang == op
	if hang {
		a.hung = append(a.hung, op)
	}
	a.mu.Unlock()
	if !hang {
		return nil
	}
	<-ctx.Done()
	return fmt.Errorf("%s: %w", op, ctx.Err())
}

func (a *memAPI) Create(ctx context.Context, s tagcloud.Spec) (tagcloud.Machine, error) {
	a.mu.Lock()
	a.next++
	m := tagcloud.Machine{ID: fmt.Sprint(a.next), Tags: slices.Clone(s.Tags), Status: "new"}
	a.machines[m.ID] = m
	a.mu.Unlock()
	return m, a.wait(ctx, "create")
}

func (a *memAPI) Get(ctx context.Context, id string) (tagcloud.Machine, error) {
	a.mu.Lock()
	m, ok := a.machines[id]
	a.mu.Unlock()
	if err := a.wait(ctx, "get"); err != nil {
		return tagcloud.Machine{}, err
	}
	if !ok {
		return m, provider.ErrNotFound
	}
	return m, nil
}

func (a *memAPI) List(_ context.Context, tag string) ([]tagcloud.Machine, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	var out []tagcloud.Machine
	for _, m := range a.machines {
		if slices.Contains(m.Tags, tag) {
			out = append(out, m)
		}
	}
	return out, nil
}

func (a *memAPI) SetTags(_ context.Context, m tagcloud.Machine, tags []string) (tagcloud.Machine, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	m.Tags = slices.Clone(tags)
	a.machines[m.ID] = m
	return m, nil
}

func (a *memAPI) Delete(ctx context.Context, id string) error {
	if err := a.wait(ctx, "delete"); err != nil {
		return err
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	delete(a.machines, id)
	return nil
}

func (a *memAPI) ids() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	var out []string
	for id := range a.machines {
		out = append(out, id)
	}
	return out
}

// callTimeout is the call bound of the tests: short, so that a hanging
// call ends soon; the tests check what happens then, not how fast.
const callTimeout = 20 * time.Millisecond

func newBackend(t *testing.T, api *memAPI) *tagcloud.Backend {
	t.Helper()
	c := tagcloud.Cloud{Provider: "memcloud", Name: "Mem", SizeWord: "size", RegionWord: "region", Sizes: "s1", Regions: "r1", Image: "img"}
	o, err := c.Check(tagcloud.Options{Owner: "tester"})
	if err != nil {
		t.Fatal(err)
	}
	return tagcloud.New(tagcloud.Config{
		Options: o, Provider: "memcloud", Codec: cloud.TagCodec{MaxLen: 255}, CallTimeout: callTimeout,
	}, api, provider.Runtime{Clock: clockwork.NewRealClock()})
}

// TestCallTimeout: a call the cloud never answers, under a caller's
// context that never ends (and an SDK that would wait forever), fails
// its step after the call timeout as a transient deadline error, and the
// acquire rolls back the machine the lost answer would have named.
func TestCallTimeout(t *testing.T) {
	for _, tt := range []struct {
		hang string
		step cloud.Step
	}{
		{"create", cloud.StepCreate},
		{"get", cloud.StepAddress},
	} {
		t.Run(tt.hang, func(t *testing.T) {
			api := &memAPI{machines: map[string]tagcloud.Machine{}, hang: tt.hang}
			b := newBackend(t, api)
			ctx, cancel := context.WithTimeout(context.Background(), tagcloudtest.AwaitLimit) // bounds a bug, never reached
			defer cancel()
			_, err := b.Acquire(ctx, tagcloudtest.NewRequest(t, time.Now()))
			if ctx.Err() != nil {
				t.Fatalf("Acquire ended only with the caller's context: %v", err)
			}
			if step, ok := cloud.FailedStep(err); !ok || step != tt.step {
				t.Errorf("failed step = %q (%v), want %q; err = %v", step, ok, tt.step, err)
			}
			if !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, provider.ErrTransient) {
				t.Errorf("err = %v, want a transient deadline error", err)
			}
			if !strings.Contains(err.Error(), "no answer from the API within "+callTimeout.String()) {
				t.Errorf("err = %v, want it to name the call timeout", err)
			}
			if strings.Contains(err.Error(), "roll back") {
				t.Errorf("rollback reported a failure: %v", err)
			}
			if diff := cmp.Diff([]string{tt.hang}, api.hung); diff != "" {
				t.Errorf("hung calls (-want +got):\n%s", diff)
			}
			if ids := api.ids(); len(ids) != 0 {
				t.Errorf("machines left: %v", ids)
			}
		})
	}
}

// TestReleaseCallTimeout: a release whose delete never answers fails
// with the call timeout instead of blocking.
func TestReleaseCallTimeout(t *testing.T) {
	api := &memAPI{machines: map[string]tagcloud.Machine{}, hang: "delete"}
	b := newBackend(t, api)
	req := tagcloudtest.NewRequest(t, time.Now())
	tags, err := cloud.TagCodec{MaxLen: 255}.Tags(map[string]string{
		cloud.LabelCrabbox: "true", cloud.LabelProvider: "memcloud", cloud.LabelLease: req.LeaseID,
	})
	if err != nil {
		t.Fatal(err)
	}
	api.machines["7"] = tagcloud.Machine{ID: "7", Tags: tags, Running: true}
	ctx, cancel := context.WithTimeout(context.Background(), tagcloudtest.AwaitLimit)
	defer cancel()
	err = b.ReleaseLease(ctx, provider.ReleaseRequest{Lease: provider.LeaseTarget{LeaseID: req.LeaseID}})
	if ctx.Err() != nil || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("ReleaseLease = %v, want the call timeout", err)
	}
}
