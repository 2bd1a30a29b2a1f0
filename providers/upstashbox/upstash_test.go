//go:build unix

package upstashbox_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/crabbox-dev/crabbox/lease"
	"github.com/crabbox-dev/crabbox/provider"
	"github.com/crabbox-dev/crabbox/providers/upstashbox"
)

// Warmup creates an ephemeral box named and labelled for the lease whose
// TTL is the lease's TTL, of the configured runtime and size.
func TestWarmupCreatesEphemeralBox(t *testing.T) {
	e := newEnv(t)
	e.b = e.backend(upstashbox.Config{Runtime: "python-alpine", Size: "large"})
	v := e.warmup("swift-crab", map[string]string{"team": "x"})
	got := e.fake.box(v.CloudID)
	want := upstashbox.BoxName(v.ID, "swift-crab")
	if got.Name != want || got.Name != "crabbox-swift-crab-"+strings.TrimPrefix(v.ID, "cbx_") {
		t.Errorf("box name %q, want %q", got.Name, want)
	}
	if diff := cmp.Diff([]string{"crabbox", v.ID, "team:x"}, got.Labels); diff != "" {
		t.Errorf("box labels (-want +got):\n%s", diff)
	}
	if got.Runtime != "python-alpine" || got.Size != "large" {
		t.Errorf("box runtime %q size %q", got.Runtime, got.Size)
	}
	if ttl := got.ExpiresAt.Sub(got.CreatedAt); ttl != time.Hour {
		t.Errorf("box TTL %v, want the lease's TTL, 1h", ttl)
	}
	wantView := provider.LeaseView{
		ID: v.ID, Slug: "swift-crab", Provider: upstashbox.Name, CloudID: got.ID, State: "idle",
		Labels: map[string]string{"team": "x"}, CreatedAt: got.CreatedAt.UTC(), ExpiresAt: got.ExpiresAt.UTC(), WorkRoot: e.fake.dir + "/work",
	}
	if diff := cmp.Diff(wantView, v); diff != "" {
		t.Errorf("view (-want +got):\n%s", diff)
	}
	st, err := e.b.Status(context.Background(), provider.StatusRequest{ID: "swift-crab"})
	if err != nil || st.ID != v.ID {
		t.Errorf("Status by slug = %+v, %v", st, err)
	}
}

// Labels that do not fit Upstash's (at most 5, of 20 characters, crabbox
// using 2) are refused before any call.
func TestWarmupRefusesLabels(t *testing.T) {
	e := newEnv(t)
	for name, labels := range map[string]map[string]string{
		"too many":   {"a": "1", "b": "2", "c": "3", "d": "4"},
		"too long":   {"team": "a-very-long-team-name"},
		"bad char":   {"team": "a b"},
		"reserved":   {"lease": "x"},
		"colon key":  {"a:b": "c"},
		"crabbox":    {"crabbox": "true"},
		"empty name": {"": "x"},
	} {
		_, err := e.b.Warmup(context.Background(), provider.WarmupRequest{LeaseID: lease.NewID(), TTL: time.Hour, Labels: labels})
		if !errors.Is(err, provider.ErrPrecondition) {
			t.Errorf("%s: %v, want ErrPrecondition", name, err)
		}
	}
	if n := e.fake.Calls(opCreate); n != 0 {
		t.Errorf("%d create calls, want none", n)
	}
}

// A lease TTL beyond the maximum lifetime gives the box the maximum, and
// says so in the log; Upstash's own cap (72h) is the default and the most
// the option may say.
func TestWarmupCapsTTL(t *testing.T) {
	e := newEnv(t)
	e.b = e.backend(upstashbox.Config{MaxLifetime: 2 * time.Hour})
	v, err := e.b.Warmup(context.Background(), provider.WarmupRequest{LeaseID: lease.NewID(), TTL: 5 * time.Hour, IdleTimeout: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if got := v.ExpiresAt.Sub(v.CreatedAt); got != 2*time.Hour {
		t.Errorf("box TTL %v, want the 2h maximum", got)
	}
	if !strings.Contains(e.log.String(), "lease TTL capped to the maximum lifetime") {
		t.Errorf("no warning in the log:\n%s", e.log.String())
	}
	if got := newEnv(t).b.MaxLifetime(); got != 72*time.Hour {
		t.Errorf("default MaxLifetime %v, want 72h", got)
	}
	_, err = upstashbox.New(upstashbox.Config{APIKey: testKey, MaxLifetime: 73 * time.Hour}, provider.Runtime{})
	if err == nil || !strings.Contains(err.Error(), "longer than Upstash keeps an ephemeral box (72h0m0s)") {
		t.Errorf("max lifetime 73h: %v, want a refusal", err)
	}
}

// List, Status, Stop and Cleanup see only boxes that carry crabbox's
// labels and the lease's name; others in the account are left alone.
func TestOnlyCrabboxBoxes(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	owned := e.warmup("mine", nil)
	other := lease.NewID()
	foreign := []string{
		e.fake.addBox("crabbox-"+strings.TrimPrefix(other, "cbx_"), []string{other}, time.Hour),              // no crabbox label
		e.fake.addBox("somebody-else", []string{"crabbox", other}, time.Hour),                                // not the lease's name
		e.fake.addBox("crabbox-"+strings.TrimPrefix(other, "cbx_"), []string{"crabbox", "other"}, time.Hour), // no lease label
		e.fake.addBox(upstashbox.BoxName(other, ""), []string{"crabbox", other, lease.NewID()}, time.Hour),   // two lease labels
	}
	all, err := e.b.List(ctx, provider.ListRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != 1 || all[0].ID != owned.ID {
		t.Errorf("List = %+v, want only %s", all, owned.ID)
	}
	if _, err := e.b.Status(ctx, provider.StatusRequest{ID: other}); !errors.Is(err, provider.ErrNotFound) {
		t.Errorf("Status of a foreign box's lease: %v, want ErrNotFound", err)
	}
	if err := e.b.Stop(ctx, provider.StopRequest{ID: other}); err != nil {
		t.Errorf("Stop: %v", err)
	}
	ds, err := e.b.Cleanup(ctx, provider.CleanupRequest{Now: e.clock.Now().Add(48 * time.Hour), Claimed: func(string) bool { return true }})
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range ds {
		if d.LeaseID != owned.ID {
			t.Errorf("cleanup decided about %+v", d)
		}
	}
	ids := e.fake.IDs()
	for _, id := range foreign {
		if !slices.Contains(ids, id) {
			t.Errorf("foreign box %s was deleted", id)
		}
	}
}

// Cleanup deletes a box only with a claim, and only once it failed or its
// TTL has passed; a dry run deletes nothing.
func TestCleanup(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	live, failed, unclaimed := e.warmup("live", nil), e.warmup("failed", nil), e.warmup("unclaimed", nil)
	e.fake.setStatus(failed.CloudID, "error")
	e.fake.setStatus(unclaimed.CloudID, "error")
	claimed := func(id string) bool { return id != unclaimed.ID }
	type outcome struct {
		ID              string
		Delete, Deleted bool
	}
	got := func(ds []provider.CleanupDecision) []outcome {
		var out []outcome
		for _, d := range ds {
			if d.Err != nil {
				t.Errorf("cleanup of %s: %v", d.LeaseID, d.Err)
			}
			out = append(out, outcome{d.LeaseID, d.Delete, d.Deleted})
		}
		slices.SortFunc(out, func(a, b outcome) int { return strings.Compare(a.ID, b.ID) })
		return out
	}
	want := []outcome{{live.ID, false, false}, {failed.ID, true, false}, {unclaimed.ID, false, false}}
	slices.SortFunc(want, func(a, b outcome) int { return strings.Compare(a.ID, b.ID) })
	ds, err := e.b.Cleanup(ctx, provider.CleanupRequest{DryRun: true, Now: e.clock.Now(), Claimed: claimed})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, got(ds)); diff != "" {
		t.Errorf("dry run (-want +got):\n%s", diff)
	}
	if n := len(e.fake.IDs()); n != 3 {
		t.Errorf("%d boxes after a dry run, want 3", n)
	}
	ds, err = e.b.Cleanup(ctx, provider.CleanupRequest{Now: e.clock.Now(), Claimed: claimed})
	if err != nil {
		t.Fatal(err)
	}
	for i := range want {
		want[i].Deleted = want[i].Delete
	}
	if diff := cmp.Diff(want, got(ds)); diff != "" {
		t.Errorf("cleanup (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{live.CloudID, unclaimed.CloudID}, e.fake.IDs()); diff != "" {
		t.Errorf("boxes left (-want +got):\n%s", diff)
	}
}

// A failed create that may have made a box (an answer lost, cut or late)
// leaves none behind; one the API refused makes no further call.
func TestWarmupRollsBack(t *testing.T) {
	for name, ft := range map[string]fault{
		"500 after": {after: true},
		"dropped":   {drop: true},
		"hang":      {hang: true},
		"refused":   {status: http.StatusBadRequest},
	} {
		t.Run(name, func(t *testing.T) {
			e := newEnv(t)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			ft.onHang = cancel
			ft.times = 1
			e.fake.fail(opCreate, ft)
			_, err := e.b.Warmup(ctx, provider.WarmupRequest{LeaseID: lease.NewID(), TTL: time.Hour})
			if err == nil {
				t.Fatal("Warmup succeeded despite the fault")
			}
			checkNoKey(t, "error", err.Error())
			if ids := e.fake.IDs(); len(ids) != 0 {
				t.Errorf("boxes left: %v", ids)
			}
			if name == "refused" && e.fake.Calls(opList) != 0 {
				t.Errorf("a refused create was followed by %d list calls", e.fake.Calls(opList))
			}
		})
	}
}

// 429 answers are tried again after what Retry-After asks (on the
// runtime's clock, which the test moves), 5xx answers to reads too; a
// create is not repeated on a 5xx; the tries are bounded; an answer asking
// for a longer wait than crabbox waits is returned at once.
func TestRetries(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	e := newEnv(t)
	v := e.warmup("", nil)

	// advance moves the clock each time the backend waits, until done.
	advance := func(done <-chan struct{}, step time.Duration) int {
		n := 0
		for {
			waited := make(chan error, 1)
			go func() { waited <- e.clock.BlockUntilContext(ctx, 1) }()
			select {
			case <-done:
				return n
			case err := <-waited:
				if err != nil {
					t.Fatal(err)
				}
				n++
				e.clock.Advance(step)
			}
		}
	}
	status := func(ft fault, step time.Duration) (int, error) {
		e.fake.fail(opList, ft)
		defer e.fake.clear(opList)
		done := make(chan struct{})
		var err error
		go func() {
			defer close(done)
			_, err = e.b.Status(ctx, provider.StatusRequest{ID: v.ID})
		}()
		waits := advance(done, step)
		return waits, err
	}

	if waits, err := status(fault{status: http.StatusTooManyRequests, retryAfter: "7", times: 2}, 7*time.Second); err != nil || waits != 2 {
		t.Errorf("two 429s asking for 7s: %d waits, %v; want 2 and success", waits, err)
	}
	date := e.clock.Now().Add(3 * time.Second).UTC().Format(http.TimeFormat)
	if waits, err := status(fault{status: http.StatusTooManyRequests, retryAfter: date, times: 1}, 3*time.Second); err != nil || waits != 1 {
		t.Errorf("a 429 asking for a date: %d waits, %v; want 1 and success", waits, err)
	}
	if waits, err := status(fault{status: http.StatusServiceUnavailable, times: 1}, time.Second); err != nil || waits != 1 {
		t.Errorf("a 503 to a read: %d waits, %v; want 1 and success", waits, err)
	}
	before := e.fake.Calls(opList)
	waits, err := status(fault{status: http.StatusBadGateway}, 8*time.Second)
	if !errors.Is(err, provider.ErrTransient) || waits != 3 || e.fake.Calls(opList)-before != 4 {
		t.Errorf("502 every time: %d waits, %d calls, %v; want 3 waits, 4 calls, a transient error", waits, e.fake.Calls(opList)-before, err)
	}
	waits, err = status(fault{status: http.StatusTooManyRequests, retryAfter: "120", times: 1}, time.Second)
	if waits != 0 || err == nil || !strings.Contains(err.Error(), "the API asks to wait 2m0s, longer than crabbox waits") {
		t.Errorf("a 429 asking for 2 minutes: %d waits, %v; want the error at once", waits, err)
	}

	e.fake.fail(opCreate, fault{status: http.StatusInternalServerError, times: 1})
	if _, err := e.b.Warmup(ctx, provider.WarmupRequest{LeaseID: lease.NewID(), TTL: time.Hour}); err == nil {
		t.Error("Warmup succeeded despite the 500")
	}
	if n := e.fake.Calls(opCreate); n != 2 {
		t.Errorf("%d create calls, want 2 (the first warmup's and one for the second: a 500 is not repeated)", n)
	}
}

// Run gives the exact exit code, stdout as it comes and stderr apart, in
// the directory asked for, with the environment sourced from a file: no
// value is in a command's arguments, variables named like the run
// script's own change nothing, and the file is gone afterwards.
func TestRun(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	v := e.warmup("", nil)
	dir := e.fake.dir + "/work/sub"
	var out, errOut strings.Builder
	res, err := e.b.Run(ctx, provider.DelegatedRunRequest{
		LeaseID: v.ID, Dir: dir, Env: map[string]string{"SECRET": "s3cr3t value", "QUOTE": "it's", "p": "/nowhere", "t": "/nowhere", "m": "x"},
		Command: []string{"sh", "-c", `printf '%s|%s|%s' "$SECRET" "$QUOTE" "$(pwd)"; printf 'no newline' >&2; exit 42`},
		Stdout:  &out, Stderr: &errOut,
	})
	if err != nil || res.ExitCode != 42 {
		t.Fatalf("Run = %v, %v; want exit 42", res, err)
	}
	if want := "s3cr3t value|it's|" + dir; out.String() != want || errOut.String() != "no newline" {
		t.Errorf("stdout %q, stderr %q; want %q and %q", out.String(), errOut.String(), want, "no newline")
	}
	for _, c := range e.fake.Commands() {
		if strings.Contains(strings.Join(c, " "), "s3cr3t") {
			t.Errorf("a command carries an environment value: %q", c)
		}
	}
	code, leftover, _, err := e.run(ctx, v.ID, dir, "sh", "-c", `ls /tmp | grep -c '^crabbox-run-.*\.env$' || true`)
	if err != nil || code != 0 || strings.TrimSpace(leftover) != "0" {
		t.Errorf("environment files left in /tmp: %q (%v)", leftover, err)
	}
	if _, err := e.b.Run(ctx, provider.DelegatedRunRequest{LeaseID: v.ID, Dir: dir, Env: map[string]string{"A B": "x"}, Command: []string{"true"}}); err == nil {
		t.Error("Run with a variable name that is not a shell name succeeded")
	}
	if _, err := e.b.Run(ctx, provider.DelegatedRunRequest{LeaseID: v.ID, Root: t.TempDir(), Command: []string{"true"}}); !errors.Is(err, provider.ErrPrecondition) {
		t.Errorf("Run with a local Root: %v, want ErrPrecondition", err)
	}
}

// Output that looks like the marker's start or an event's is stdout, not
// cut; a stream that breaks before the exit event is an error, and the
// command is killed.
func TestRunStreamEdges(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	v := e.warmup("", nil)
	dir := e.fake.dir + "/work"
	code, out, _, err := e.run(ctx, v.ID, dir, "printf", "%s", "\x1ecrabbox-stderr-\nevent: exi\x1ecrabbox")
	if err != nil || code != 0 || out != "\x1ecrabbox-stderr-\nevent: exi\x1ecrabbox" {
		t.Errorf("Run printing look-alikes = %d, %q, %v", code, out, err)
	}
	e.fake.fail(opStream, fault{drop: true, times: 1})
	if _, _, _, err := e.run(ctx, v.ID, dir, "true"); err == nil {
		t.Error("Run on a cut stream succeeded")
	}
	if n := e.fake.Calls(opExec); n == 0 {
		t.Error("no kill after the cut stream")
	}
	// A start the API refused leaves no environment file behind.
	e.fake.fail(opStream, fault{status: http.StatusBadRequest, times: 1})
	_, err = e.b.Run(ctx, provider.DelegatedRunRequest{LeaseID: v.ID, Dir: dir, Env: map[string]string{"SECRET": "x"}, Command: []string{"true"}})
	if err == nil {
		t.Error("Run succeeded despite the refused start")
	}
	code, left, _, err := e.run(ctx, v.ID, dir, "sh", "-c", `ls /tmp | grep -c '^crabbox-run-.*\.env$' || true`)
	if err != nil || code != 0 || strings.TrimSpace(left) != "0" {
		t.Errorf("environment files left in /tmp after a refused start: %q (%v)", left, err)
	}
}

// An error answer carrying the API key does not put it in an error.
func TestKeyNotInErrors(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	bad := newBackend(t, e.fake, upstashbox.Config{APIKey: "box_wrong_key_0123456789"}, provider.Runtime{Clock: e.clock})
	_, err := bad.List(ctx, provider.ListRequest{})
	if !errors.Is(err, provider.ErrUnauthenticated) {
		t.Errorf("List with a wrong key: %v, want ErrUnauthenticated", err)
	}
	checks, err := bad.Doctor(ctx)
	if err != nil || len(checks) != 1 || checks[0].OK || !strings.Contains(checks[0].Detail, "the API key (UPSTASH_BOX_API_KEY) is refused") {
		t.Errorf("Doctor with a wrong key = %+v, %v", checks, err)
	}
	checkNoKey(t, "doctor", fmt.Sprint(checks))
	checks, err = e.b.Doctor(ctx)
	if err != nil || len(checks) != 1 || !checks[0].OK {
		t.Errorf("Doctor = %+v, %v", checks, err)
	}
	checkNoKey(t, "doctor", fmt.Sprint(checks))
	checkNoKey(t, "log", e.log.String())
}
