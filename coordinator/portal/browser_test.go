package portal_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/crabbox-dev/crabbox/coordinator/api"
	"github.com/crabbox-dev/crabbox/internal/testenv"
)

// browserTests are the portal's tests in a real headless Chromium.
var browserTests = &testenv.Group{Name: "portal browser", Enable: "bash .ci/setup.d/40-chromium.sh as root (Debian's chromium package)"}

// chromium finds Debian's chromium, or another Chrome on PATH.
func chromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	browserTests.Skip(t, "no chromium on PATH")
	return ""
}

// headless starts a headless Chromium that reaches only loopback: every
// other address goes to a proxy that is not there, and background
// networking is off.
func headless(t *testing.T) context.Context {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chromium(t)),
		chromedp.NoSandbox, // tests run as root in CI
		chromedp.DisableGPU,
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.ProxyServer("http://127.0.0.1:9"),
		chromedp.UserDataDir(t.TempDir()),
	)
	alloc, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(alloc)
	t.Cleanup(func() {
		cancel()
		cancelAlloc()
	})
	ctx, cancelTimeout := context.WithTimeout(ctx, 2*time.Minute)
	t.Cleanup(cancelTimeout)
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("start chromium: %v", err)
	}
	return ctx
}

// step runs actions as one named step of the walk; on failure it saves a
// screenshot of the page under the test's artifact directory.
func step(t *testing.T, ctx context.Context, name string, actions ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	if err := chromedp.Do(ctx, actions...); err != nil {
		shotCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		if shot, err := chromedp.Run(shotCtx, chromedp.FullScreenshot(80)); err == nil {
			file := filepath.Join(t.ArtifactDir(), strings.ReplaceAll(name, " ", "-")+".jpg")
			if os.WriteFile(file, shot, 0o644) == nil {
				t.Logf("screenshot of the page: %s", file)
			}
		}
		t.Fatalf("%s: %v", name, err)
	}
}

// textContains waits until the element sel's text contains want.
func textContains(sel, want string) chromedp.Action[chromedp.Void] {
	poll := chromedp.Poll[bool](fmt.Sprintf(`(() => { const e = document.querySelector(%q); return !!e && e.textContent.includes(%q); })()`, sel, want),
		chromedp.WithPollingInterval(100*time.Millisecond))
	return chromedp.Func(func(ctx context.Context, t *chromedp.Target) error {
		for {
			_, err := poll(ctx, t)
			if err == nil || ctx.Err() != nil || !reloaded(err) {
				return err
			}
		}
	})
}

// reloaded reports whether a poll failed because the page reloaded under
// it (a click that navigates): the poll starts again.
func reloaded(err error) bool {
	msg := err.Error()
	return strings.Contains(msg, "navigated or closed") || strings.Contains(msg, "context was destroyed") || strings.Contains(msg, "Cannot find context")
}

// A user signs in with (a fake) GitHub, sees a lease created through the API, follows a running
// run's output, is asked to confirm a release that names the run (cancels, then confirms), sees
// the run end and signs out.
func TestPortalInBrowser(t *testing.T) {
	ctx := headless(t)
	opt, gh, aliceGH, _ := withGitHub(t)
	gh.ApproveAs(aliceGH)
	s := newSite(t, false, opt)
	alice := s.token("alice", "acme")
	l := s.register(alice, "alice-box-1", "alice-box")
	cl := s.api(alice)
	run, err := cl.CreateRun(t.Context(), api.RunRequest{LeaseID: l.ID, Provider: "ssh", Command: []string{"make", "test"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cl.AppendEvent(t.Context(), run.ID, api.EventRequest{Type: api.EventOutput, Stream: api.StreamStdout, Message: "first line\n"}); err != nil {
		t.Fatal(err)
	}

	step(t, ctx, "sign in",
		chromedp.Navigate(s.url+"/portal/"),
		chromedp.WaitVisible("#github"),
		chromedp.Click("#github"),
		chromedp.WaitVisible("#leases"),
		textContains("#leases", "alice-box"),
	)
	cookie, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.cookie`))
	if err != nil || cookie != "" {
		t.Errorf("document.cookie = %q (%v), want the HttpOnly session cookie hidden", cookie, err)
	}

	step(t, ctx, "follow the run",
		chromedp.Navigate(s.url+"/portal/runs/"+run.ID),
		textContains("#log", "first line"),
		textContains("#state", "running"),
	)
	if _, err := cl.AppendEvent(t.Context(), run.ID, api.EventRequest{Type: api.EventOutput, Stream: api.StreamStdout, Message: "second line\n"}); err != nil {
		t.Fatal(err)
	}
	step(t, ctx, "see new output", textContains("#log", "second line"))

	// Release asks first and names the run still going; cancel keeps the
	// lease, confirm releases it.
	step(t, ctx, "ask before releasing",
		chromedp.Navigate(s.url+"/portal/leases/"+l.ID),
		chromedp.WaitVisible("#release"),
		chromedp.Click("#release"),
		chromedp.WaitVisible("#running"),
		textContains("#running", run.ID),
		textContains("#running", "make test"),
		textContains("#running-warning", "still going"),
		chromedp.Click("#cancel-release"),
		chromedp.WaitVisible("#release"),
		textContains("#state", "active"),
	)
	if got, err := cl.GetLease(t.Context(), l.ID); err != nil || got.State != api.LeaseActive {
		t.Errorf("lease after cancelling the release = %v, %v; want active", got.State, err)
	}
	step(t, ctx, "confirm the release",
		chromedp.Click("#release"),
		chromedp.WaitVisible("#confirm-release"),
		textContains("#running", run.ID),
		chromedp.Click("#confirm-release"),
		textContains("#flash", "Lease released."),
		textContains("#state", "released"),
	)
	if got, err := cl.GetLease(t.Context(), l.ID); err != nil || got.State != api.LeaseReleased {
		t.Errorf("lease after the confirmed release = %v, %v; want released", got.State, err)
	}

	if _, err := cl.FinishRun(t.Context(), run.ID, api.FinishRequest{ExitCode: 2, Log: "first line\nsecond line\nFAIL\n"}); err != nil {
		t.Fatal(err)
	}
	step(t, ctx, "see the run end",
		chromedp.Navigate(s.url+"/portal/runs/"+run.ID),
		textContains("#state", "failed"), textContains("#exit", "2"))

	step(t, ctx, "sign out",
		chromedp.Click("#signout"),
		chromedp.WaitVisible("#token"),
		textContains("#message", "Signed out. The crabbox token this GitHub sign-in issued is revoked."),
		chromedp.Navigate(s.url+"/portal/"),
		chromedp.WaitVisible("#token"),
	)
}

// A running run's page shows output and events recorded after it loaded,
// and the run's end, without reloading (static/run.js); a page without
// script still offers a reload.
func TestRunPageFollowsTheRunLive(t *testing.T) {
	ctx := headless(t)
	opt, gh, aliceGH, _ := withGitHub(t)
	gh.ApproveAs(aliceGH)
	s := newSite(t, false, opt)
	alice := s.token("alice", "acme")
	cl := s.api(alice)
	run, err := cl.CreateRun(t.Context(), api.RunRequest{Provider: "ssh", Command: []string{"make", "test"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cl.AppendEvent(t.Context(), run.ID, api.EventRequest{Type: api.EventOutput, Stream: api.StreamStdout, Message: "first line\n"}); err != nil {
		t.Fatal(err)
	}
	step(t, ctx, "sign in",
		chromedp.Navigate(s.url+"/portal/"),
		chromedp.WaitVisible("#github"),
		chromedp.Click("#github"),
		chromedp.WaitVisible("#signout"),
	)
	step(t, ctx, "open the run",
		chromedp.Navigate(s.url+"/portal/runs/"+run.ID),
		textContains("#log", "first line"),
		textContains("#live", "Following the run"),
	)
	// A mark the page keeps only while it is not reloaded.
	if _, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`window.crabboxMark = true`)); err != nil {
		t.Fatal(err)
	}
	for _, ev := range []api.EventRequest{
		{Type: api.EventOutput, Stream: api.StreamStdout, Message: "second line\n"},
		{Type: api.EventCommand, Phase: api.PhaseCommand, Message: "exit 2"},
	} {
		if _, err := cl.AppendEvent(t.Context(), run.ID, ev); err != nil {
			t.Fatal(err)
		}
	}
	step(t, ctx, "see the new output and event",
		textContains("#log", "second line"),
		textContains("#events", "exit 2"),
	)
	if _, err := cl.FinishRun(t.Context(), run.ID, api.FinishRequest{ExitCode: 2}); err != nil {
		t.Fatal(err)
	}
	step(t, ctx, "see the run end", textContains("#state", "failed"), textContains("#exit", "2"), textContains("#live", "ended"))
	kept, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`window.crabboxMark === true && document.querySelectorAll("#events tbody tr").length === 3`))
	if err != nil || !kept {
		t.Errorf("the page reloaded, or shows an event twice (%v)", err)
	}
}
