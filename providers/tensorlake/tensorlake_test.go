//go:build unix

package tensorlake_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/crabbox-dev/crabbox/lease"
	"github.com/crabbox-dev/crabbox/provider"
	"github.com/crabbox-dev/crabbox/providers/tensorlake"
)

// The fake answers as the reference says: a bearer key is required, a
// timeout beyond the plan is refused, a live name is taken, the list pages
// with next_cursor, and a path with ".." is forbidden.
func TestFake(t *testing.T) {
	f := newFake(t)
	ctx := testContext(t)
	do := func(method, url, key, body string, hdr map[string]string) (int, string) {
		t.Helper()
		req, err := http.NewRequestWithContext(ctx, method, url, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+key)
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		resp, err := f.client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, _ := do("GET", f.api.URL+"/sandboxes", "wrong", "", nil); code != http.StatusUnauthorized {
		t.Errorf("list with a wrong key: %d, want 401", code)
	}
	create := `{"name":"n1","resources":{"cpus":1,"memory_mb":512},"timeout_secs":`
	if code, body := do("POST", f.api.URL+"/sandboxes", f.key, create+`7200}`, nil); code != http.StatusBadRequest || !strings.Contains(body, "maximum") {
		t.Errorf("create beyond the plan: %d %s, want 400 naming the maximum", code, body)
	}
	if code, _ := do("POST", f.api.URL+"/sandboxes", f.key, create+`60}`, nil); code != http.StatusOK {
		t.Errorf("create: %d", code)
	}
	if code, _ := do("POST", f.api.URL+"/sandboxes", f.key, create+`60}`, nil); code != http.StatusConflict {
		t.Errorf("create of a taken name: %d, want 409", code)
	}
	f.add("a")
	f.add("b")
	f.pageSize = 2
	code, body := do("GET", f.api.URL+"/sandboxes?limit=100", f.key, "", nil)
	if code != http.StatusOK || !strings.Contains(body, `"next_cursor":"Mg=="`) {
		t.Errorf("first page: %d %s, want a next_cursor", code, body)
	}
	if code, body := do("GET", f.api.URL+"/sandboxes?cursor=Mg%3D%3D&direction=forward", f.key, "", nil); code != http.StatusOK || !strings.Contains(body, `"next_cursor":null`) {
		t.Errorf("last page: %d %s, want next_cursor null", code, body)
	}
	id := f.live()[1].id
	hdr := map[string]string{"X-Tensorlake-Sandbox-Id": id}
	if code, _ := do("PUT", f.proxy.URL+"/api/v1/files?path="+f.root+"/x/../y", f.key, "data", hdr); code != http.StatusForbidden {
		t.Errorf("write with ..: %d, want 403", code)
	}
	if code, _ := do("GET", f.proxy.URL+"/api/v1/files?path="+f.root+"/missing", f.key, "", hdr); code != http.StatusNotFound {
		t.Errorf("read of a missing file: %d, want 404", code)
	}
}

// A new sandbox is pending at first: Warmup waits (on the fake clock)
// until it runs.
func TestWarmupWaitsUntilRunning(t *testing.T) {
	f := newFake(t)
	f.pendingGets = 2
	b := newBackend(t, f)
	ctx := testContext(t)
	done := make(chan error, 1)
	go func() {
		_, err := b.Warmup(ctx, warmupReq("slow-crab", time.Hour))
		done <- err
	}()
	for range 2 {
		if err := f.clock.(interface {
			BlockUntilContext(context.Context, int) error
		}).BlockUntilContext(ctx, 1); err != nil {
			t.Fatal(err)
		}
		f.clock.(interface{ Advance(time.Duration) }).Advance(2 * time.Second)
	}
	if err := <-done; err != nil {
		t.Fatalf("Warmup: %v", err)
	}
	if n := f.count("get"); n != 3 {
		t.Errorf("sandbox read %d times, want 3 (pending, pending, running)", n)
	}
}

// Lease identity is in the sandbox's name and the caller's labels in the
// labels file: List and Status show both, by lease ID and by slug.
func TestLifecycleByNameAndSlug(t *testing.T) {
	f := newFake(t)
	b := newBackend(t, f)
	ctx := testContext(t)
	v := warmup(t, ctx, b, "blue-crab")
	live := f.live()
	if len(live) != 1 || live[0].name != tensorlake.SandboxName("tester", v.ID, "blue-crab") {
		t.Fatalf("sandboxes = %+v, want one named for the lease", live)
	}
	st, err := b.Status(ctx, provider.StatusRequest{ID: "blue-crab"})
	if err != nil {
		t.Fatal(err)
	}
	if st.ID != v.ID || st.Labels["team"] != "crabs" || !st.ExpiresAt.Equal(v.ExpiresAt) || st.CloudID != live[0].id {
		t.Errorf("Status by slug = %+v, want lease %s with team=crabs expiring %v", st, v.ID, v.ExpiresAt)
	}
	if err := b.Stop(ctx, provider.StopRequest{ID: "blue-crab"}); err != nil {
		t.Fatal(err)
	}
	if n := len(f.live()); n != 0 {
		t.Errorf("%d sandboxes live after Stop by slug", n)
	}
}

// List and Stop see only this owner's crabbox sandboxes: another owner's,
// and one crabbox did not make, are neither listed nor terminated.
func TestOwnerScope(t *testing.T) {
	f := newFake(t)
	b := newBackend(t, f)
	ctx := testContext(t)
	otherID := lease.NewID()
	f.add(tensorlake.SandboxName("someone-else", otherID, "their-crab"))
	f.add("my-own-app")
	f.add("crabbox-nothex-cbx")
	mine := warmup(t, ctx, b, "")
	all, err := b.List(ctx, provider.ListRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != 1 || all[0].ID != mine.ID {
		t.Errorf("List = %+v, want only lease %s", all, mine.ID)
	}
	if err := b.Stop(ctx, provider.StopRequest{ID: otherID}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Status(ctx, provider.StatusRequest{ID: "their-crab"}); !errors.Is(err, provider.ErrNotFound) {
		t.Errorf("Status of another owner's slug: %v, want ErrNotFound", err)
	}
	if n := len(f.live()); n != 4 {
		t.Errorf("%d sandboxes live, want 4: Stop of another owner's lease terminated something", n)
	}
}

// List follows next_cursor to the last page.
func TestListPages(t *testing.T) {
	f := newFake(t)
	f.pageSize = 2
	b := newBackend(t, f)
	ctx := testContext(t)
	want := map[string]bool{}
	for range 5 {
		want[warmup(t, ctx, b, "").ID] = true
	}
	all, err := b.List(ctx, provider.ListRequest{})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	for _, v := range all {
		got[v.ID] = v.Labels["team"] == "crabs"
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("listed leases (with their labels) (-want +got):\n%s", diff)
	}
}

// A failing step of Warmup, or a create whose answer is lost, leaves no
// sandbox: the rollback finds them by name.
func TestWarmupRollsBack(t *testing.T) {
	for _, ft := range []fakeFault{
		{op: "create", after: true},
		{op: "write", status: http.StatusBadRequest, after: true},
		{op: "get", status: http.StatusNotFound},
	} {
		t.Run(ft.op, func(t *testing.T) {
			f := newFake(t)
			f.fail(ft)
			b := newBackend(t, f)
			if _, err := b.Warmup(testContext(t), warmupReq("", time.Hour)); err == nil {
				t.Fatal("Warmup succeeded despite the fault")
			}
			if live := f.live(); len(live) != 0 {
				t.Errorf("sandboxes left after a failed warmup: %+v", live)
			}
		})
	}
}

// A sandbox ends at its timeout: the lease is then gone.
func TestSandboxEndsAtTimeout(t *testing.T) {
	f := newFake(t)
	b := newBackend(t, f)
	ctx := testContext(t)
	v := warmup(t, ctx, b, "")
	f.clock.(interface{ Advance(time.Duration) }).Advance(50 * time.Minute)
	if _, err := b.Status(ctx, provider.StatusRequest{ID: v.ID}); !errors.Is(err, provider.ErrNotFound) {
		t.Errorf("Status past the timeout: %v, want ErrNotFound", err)
	}
	if _, err := b.Run(ctx, provider.DelegatedRunRequest{LeaseID: v.ID, Command: []string{"true"}}); !errors.Is(err, provider.ErrNotFound) {
		t.Errorf("Run past the timeout: %v, want ErrNotFound", err)
	}
}

// Output comes back byte for byte although Tensorlake streams lines: a
// last line without a newline, empty lines, no output at all.
func TestOutputExact(t *testing.T) {
	f := newFake(t)
	b := newBackend(t, f)
	ctx := testContext(t)
	v := warmup(t, ctx, b, "")
	for _, want := range []string{"", "\n", "a", "a\n\nb", "\n\n", "x\r\n"} {
		var out, errOut bytes.Buffer
		res, err := b.Run(ctx, provider.DelegatedRunRequest{LeaseID: v.ID, Command: []string{"sh", "-c", `printf '%s' "$1"; printf '%s' "$1" >&2`, "sh", want},
			Stdout: &out, Stderr: &errOut})
		if err != nil || res.ExitCode != 0 {
			t.Fatalf("Run: %v, exit %d", err, res.ExitCode)
		}
		if out.String() != want || errOut.String() != want {
			t.Errorf("output of printf %q: stdout %q, stderr %q", want, out.String(), errOut.String())
		}
	}
	var errOut bytes.Buffer
	res, err := b.Run(ctx, provider.DelegatedRunRequest{LeaseID: v.ID, Command: []string{"no-such-command-crabbox"}, Stderr: &errOut})
	if err != nil || res.ExitCode != 127 || !strings.Contains(errOut.String(), "not found") {
		t.Errorf("a missing command: exit %d, err %v, stderr %q; want 127 and the shell's message", res.ExitCode, err, errOut.String())
	}
}

// Doctor lists without changing anything and says what it found.
func TestDoctor(t *testing.T) {
	f := newFake(t)
	b := newBackend(t, f)
	ctx := testContext(t)
	warmup(t, ctx, b, "")
	checks, err := b.Doctor(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(checks) != 2 || !checks[0].OK || !strings.Contains(checks[0].Detail, "1 crabbox sandbox of owner tester") || !strings.Contains(checks[1].Detail, "capped at 1h0m0s") {
		t.Errorf("checks = %+v", checks)
	}
	f.key = "rotated"
	checks, err = b.Doctor(ctx)
	if err != nil || len(checks) != 1 || checks[0].OK || !strings.Contains(checks[0].Detail, "HTTP 401") || strings.Contains(checks[0].Detail, "tl_apiKey_test") {
		t.Errorf("checks with a refused key = %+v, %v; want one failed check naming HTTP 401, without the key", checks, err)
	}
}
