package portal_test

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/crabbox-dev/crabbox/coordinator/api"
)

// previewSite is a site whose coordinator has the local provider, with a
// lease of alice's whose box accepts the coordinator's access key (put
// there as the lease owner's library does), and a web app under test on
// the box (the local provider's box is this machine, so a loopback server
// of the test is on it). It returns the site, alice's token, the lease and
// the app's port.
func previewSite(t *testing.T) (*site, string, api.Lease, int) {
	t.Helper()
	s := newBoxSite(t)
	alice := s.token("alice", "acme")
	l := s.boxLease(alice)

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	app := &http.Server{Handler: http.HandlerFunc(webApp)}
	go app.Serve(ln)
	t.Cleanup(func() { app.Close() })
	return s, alice, l, ln.Addr().(*net.TCPAddr).Port
}

// webApp is the app under test: a page whose script (a file of its own)
// reports what it could do, and an echo of what the box was sent.
func webApp(w http.ResponseWriter, r *http.Request) {
	switch r.URL.Path {
	case "/":
		http.SetCookie(w, &http.Cookie{Name: "app", Value: "1", Path: "/"})
		io.WriteString(w, `<!doctype html><title>app</title><p id="out">script did not run</p><script src="app.js"></script>`)
	case "/app.js":
		w.Header().Set("Content-Type", "text/javascript")
		io.WriteString(w, `
let cookie;
try { cookie = "cookie " + JSON.stringify(document.cookie); } catch (e) { cookie = "no cookies"; }
document.getElementById("out").textContent = "script ran; " + cookie;
fetch("/portal/", {credentials: "include", redirect: "manual"})
  .then(r => { document.getElementById("out").dataset.portal = r.type + " " + r.status; })
  .catch(e => { document.getElementById("out").dataset.portal = "refused"; });
`)
	case "/echo":
		fmt.Fprintf(w, "%s?%s auth=%q cookie=%q", r.URL.Path, r.URL.RawQuery, r.Header.Get("Authorization"), r.Header.Get("Cookie"))
	default:
		http.NotFound(w, r)
	}
}

// The lease page's preview form leads to the app, whose requests go to
// the box without the session's cookie or token.
func TestPortalPreview(t *testing.T) {
	s, alice, l, port := previewSite(t)
	b := s.browser()
	b.login(alice)

	page := b.get("/portal/leases/" + l.ID)
	if !strings.Contains(page.body, `action="/portal/leases/`+l.ID+`/preview"`) {
		t.Errorf("lease page has no preview form:\n%s", page.body)
	}
	app := b.get(fmt.Sprintf("/portal/leases/%s/preview?port=%d", l.ID, port))
	if app.status != http.StatusOK || !strings.Contains(app.body, `<script src="app.js">`) || !strings.HasPrefix(app.path, "/portal/preview/") {
		t.Fatalf("preview: %d at %s: %q", app.status, app.path, app.body)
	}
	if csp := app.header.Values("Content-Security-Policy"); len(csp) != 1 || !strings.HasPrefix(csp[0], "sandbox ") {
		t.Errorf("preview CSP %q, want the sandbox alone", csp)
	}
	if c := app.header.Values("Set-Cookie"); len(c) != 0 {
		t.Errorf("the app set cookies on the coordinator's origin: %q", c)
	}
	echo := b.get(app.path + "echo?q=1")
	if want := `/echo?q=1 auth="" cookie=""`; echo.body != want {
		t.Errorf("the box was sent %q, want %q", echo.body, want)
	}

	for _, tc := range []struct{ path, says string }{
		{"/portal/leases/" + l.ID + "/preview?port=0", "not a port"},
		{"/portal/leases/" + l.ID + "/preview?port=x", "not a port"},
		{"/portal/preview/forged/", "not valid"},
	} {
		if r := b.get(tc.path); r.status/100 != 4 || !strings.Contains(r.body, tc.says) {
			t.Errorf("%s: %d %q, want a 4xx saying %q", tc.path, r.status, r.body, tc.says)
		}
	}
	// The ticket is the authority (it carries the token), not the
	// session: it works in a browser without one.
	other := s.browser()
	if r := other.get(app.path + "echo"); r.status != http.StatusOK {
		t.Errorf("ticket in another browser: %d %q", r.status, r.body)
	}
}

// In Chromium the app's script runs, in the sandbox: it cannot read
// cookies nor reach the portal as the signed-in user.
func TestPortalPreviewBrowser(t *testing.T) {
	s, alice, l, port := previewSite(t)
	ctx := headless(t)
	step(t, ctx, "sign in",
		chromedp.Navigate(s.url+"/portal/login"),
		chromedp.SendKeys(`#token`, alice),
		chromedp.Submit(`#token`),
		chromedp.WaitVisible(`#leases`),
	)
	step(t, ctx, "open the preview",
		chromedp.Navigate(fmt.Sprintf("%s/portal/leases/%s", s.url, l.ID)),
		chromedp.SendKeys(`#preview-port`, fmt.Sprint(port)),
	)
	// The form opens a new tab; the test follows its address in this one.
	step(t, ctx, "the app's script runs",
		chromedp.Navigate(fmt.Sprintf("%s/portal/leases/%s/preview?port=%d", s.url, l.ID, port)),
		textContains("#out", "script ran; no cookies"),
	)
	portal, err := chromedp.Run(ctx, chromedp.Poll[string](`document.getElementById("out").dataset.portal`))
	t.Logf("the app's fetch of the portal: %q", portal)
	if err != nil || strings.Contains(portal, "200") {
		t.Errorf("the app's fetch of the portal: %q (%v), want it refused", portal, err)
	}
}
