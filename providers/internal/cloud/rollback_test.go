package cloud_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/crabbox-dev/crabbox/provider"
	"github.com/crabbox-dev/crabbox/providers/internal/cloud"
)

// recorder records undo calls and whether their context was alive.
type recorder struct{ calls []string }

func (r *recorder) undo(name string, err error) func(context.Context) error {
	return func(ctx context.Context) error {
		state := "live"
		if ctx.Err() != nil {
			state = "dead"
		}
		if _, ok := ctx.Deadline(); !ok {
			state += ",unbounded"
		}
		r.calls = append(r.calls, name+":"+state)
		return err
	}
}

func TestRollbackFinish(t *testing.T) {
	boom := errors.New("boom")
	tests := []struct {
		name      string
		acquire   error
		cancel    bool
		undoErr   error
		wantCalls []string
		wantErr   []string
	}{
		{"success keeps everything", nil, false, nil, nil, nil},
		{"failure undoes in reverse", cloud.Failed(cloud.StepSSH, boom), false, nil,
			[]string{"server:live", "key:live"}, []string{"ssh: boom"}},
		{"cancelled context undoes with a fresh context", nil, true, nil,
			[]string{"server:live", "key:live"}, []string{"acquire abandoned: context canceled"}},
		{"failed undo still runs the rest", boom, false, errors.New("api down"),
			[]string{"server:live", "key:live"}, []string{"boom", "roll back server 42 (create): api down", "roll back key 7 (key): api down"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			var rec recorder
			err := func() (err error) {
				rb := cloud.NewRollback(nil, time.Minute)
				defer rb.Finish(ctx, &err)
				rb.Add(cloud.StepKey, "key 7", rec.undo("key", tt.undoErr))
				rb.Add(cloud.StepCreate, "server 42", rec.undo("server", tt.undoErr))
				if tt.cancel {
					cancel()
				}
				return tt.acquire
			}()
			if diff := cmp.Diff(tt.wantCalls, rec.calls); diff != "" {
				t.Errorf("undo calls (-want +got):\n%s", diff)
			}
			if tt.wantErr == nil && err != nil {
				t.Errorf("err = %v, want nil", err)
			}
			for _, want := range tt.wantErr {
				if err == nil || !strings.Contains(err.Error(), want) {
					t.Errorf("err = %v, want one containing %q", err, want)
				}
			}
		})
	}
}

func TestRollbackRunEmptiesStack(t *testing.T) {
	var rec recorder
	rb := cloud.NewRollback(nil, 0)
	rb.Add(cloud.StepKey, "key", rec.undo("key", nil))
	if rb.Len() != 1 {
		t.Fatalf("Len = %d, want 1", rb.Len())
	}
	if err := rb.Run(context.Background()); err != nil || rb.Len() != 0 {
		t.Fatalf("Run = %v, Len after = %d", err, rb.Len())
	}
	if err := rb.Run(context.Background()); err != nil || len(rec.calls) != 1 {
		t.Errorf("second Run undid again: %v %v", err, rec.calls)
	}
}

func TestStepError(t *testing.T) {
	err := fmt.Errorf("acquire: %w", cloud.Failed(cloud.StepAddress, provider.ErrTransient))
	step, ok := cloud.FailedStep(err)
	if !ok || step != cloud.StepAddress || !errors.Is(err, provider.ErrTransient) {
		t.Errorf("FailedStep = %q, %v; Is(ErrTransient) = %v", step, ok, errors.Is(err, provider.ErrTransient))
	}
	if cloud.Failed(cloud.StepKey, nil) != nil {
		t.Errorf("Failed(step, nil) != nil")
	}
	if _, ok := cloud.FailedStep(errors.New("x")); ok {
		t.Errorf("FailedStep of a plain error reports a step")
	}
	if diff := cmp.Diff([]cloud.Step{"key", "create", "address", "ssh", "label"}, cloud.Steps()); diff != "" {
		t.Errorf("Steps (-want +got):\n%s", diff)
	}
}

func TestFirstWithCapacity(t *testing.T) {
	noCapacity := fmt.Errorf("resource_unavailable: %w", provider.ErrCapacity)
	tests := []struct {
		name      string
		results   map[string]error
		wantTried []string
		want      string
		wantErr   string
	}{
		{"first works", map[string]error{}, []string{"a"}, "a", ""},
		{"falls back on capacity", map[string]error{"a": noCapacity, "b": noCapacity}, []string{"a", "b", "c"}, "c", ""},
		{"fails fast on other errors", map[string]error{"a": noCapacity, "b": provider.ErrUnauthenticated}, []string{"a", "b"}, "", "unauthenticated"},
		{"all out of capacity", map[string]error{"a": noCapacity, "b": noCapacity, "c": noCapacity}, []string{"a", "b", "c"}, "", "every candidate is out of capacity"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var tried []string
			got, err := cloud.FirstWithCapacity(context.Background(), nil, []string{"a", "b", "c"}, func(_ context.Context, c string) error {
				tried = append(tried, c)
				return tt.results[c]
			})
			if diff := cmp.Diff(tt.wantTried, tried); diff != "" {
				t.Errorf("tried (-want +got):\n%s", diff)
			}
			if got != tt.want {
				t.Errorf("got %q, want %q", got, tt.want)
			}
			if tt.wantErr == "" && err != nil || tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)) {
				t.Errorf("err = %v, want %q", err, tt.wantErr)
			}
			if tt.name == "all out of capacity" && !errors.Is(err, provider.ErrCapacity) {
				t.Errorf("err = %v, want one matching ErrCapacity", err)
			}
		})
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := cloud.FirstWithCapacity(ctx, nil, []string{"a"}, func(context.Context, string) error { return nil }); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled: err = %v", err)
	}
	if _, err := cloud.FirstWithCapacity(context.Background(), nil, []string(nil), func(context.Context, string) error { return nil }); err == nil {
		t.Errorf("no candidates: no error")
	}
}
