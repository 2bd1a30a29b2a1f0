package portal_test

import (
	"context"
	"crypto/ed25519"
	"crypto/hkdf"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"
	"github.com/coder/websocket"
	"github.com/google/go-cmp/cmp"
	"github.com/jonboulle/clockwork"
	"golang.org/x/crypto/ssh"

	"github.com/crabbox-dev/crabbox/coordinator"
	"github.com/crabbox-dev/crabbox/coordinator/api"
	"github.com/crabbox-dev/crabbox/coordinator/auth"
	"github.com/crabbox-dev/crabbox/coordinator/portal"
	"github.com/crabbox-dev/crabbox/coordinator/store/sqlite"
	"github.com/crabbox-dev/crabbox/internal/handover"
	"github.com/crabbox-dev/crabbox/provider"
	"github.com/crabbox-dev/crabbox/providers/local"
)

// newBoxSite is newSite with the local provider: its boxes run on this
// machine, so a terminal has a real shell to open.
func newBoxSite(t *testing.T) *site {
	t.Helper()
	st, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "coordinator.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	clock := clockwork.NewFakeClockAt(start)
	box, err := local.New(local.Config{Root: filepath.Join(t.TempDir(), "boxes")}, provider.Runtime{Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { box.Close() })
	srv, err := coordinator.New(coordinator.Config{
		Store:     st,
		Providers: map[string]provider.SSHLeaseBackend{"local": box},
		Tokens:    auth.Config{AdminToken: adminToken, SessionSecret: sessionSecret, AdminOwners: []string{"root"}, DefaultOrg: "acme"},
		Clock:     clock,
	})
	if err != nil {
		t.Fatal(err)
	}
	p, err := portal.New(portal.Config{API: srv, Issuer: srv, SessionSecret: []byte(sessionSecret), Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle(portal.Prefix+"/", p)
	mux.Handle("/", srv)
	hs := httptest.NewServer(mux)
	t.Cleanup(hs.Close)
	t.Cleanup(srv.CloseControl) // ends open terminals before the server closes
	return &site{t: t, url: hs.URL, clock: clock, srv: hs, store: st}
}

// boxLease creates a lease on the local provider for token and puts the
// coordinator's access key on its box, as the lease's client does.
func (s *site) boxLease(token string) api.Lease {
	s.t.Helper()
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		s.t.Fatal(err)
	}
	sshPub, _ := ssh.NewPublicKey(pub)
	signer, _ := ssh.NewSignerFromKey(priv)
	var id [6]byte
	_, _ = rand.Read(id[:])
	l, err := s.api(token).CreateLease(s.t.Context(), api.LeaseRequest{
		LeaseID: "cbx_" + hex.EncodeToString(id[:]), CreateAttemptID: api.NewCreateAttemptID(),
		Provider: "local", SSHPublicKey: string(ssh.MarshalAuthorizedKey(sshPub)),
	})
	if err != nil {
		s.t.Fatal(err)
	}
	port, _ := strconv.Atoi(l.SSHPort)
	c, _, err := handover.Dial(s.t.Context(), handover.Box{Host: l.Host, Ports: []int{port}, User: l.SSHUser, HostKey: l.SSHHostKey}, signer)
	if err != nil {
		s.t.Fatalf("dial the box with the lease key: %v", err)
	}
	defer c.Close()
	if err := handover.SetKey(s.t.Context(), c, accessKey(s.t, l.ID).PublicKey()); err != nil {
		s.t.Fatalf("install the access key: %v", err)
	}
	return l
}

// accessKey is the coordinator's access key to lease id's box, derived
// from the session secret as the coordinator derives it.
func accessKey(t *testing.T, id string) ssh.Signer {
	t.Helper()
	secret, err := hkdf.Key(sha256.New, []byte(sessionSecret), nil, "crabbox box access keys v1", 32)
	if err != nil {
		t.Fatal(err)
	}
	k, err := handover.AccessKey(secret, id)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// termStep is step that shows the terminal's text when it fails.
func termStep(t *testing.T, ctx context.Context, name string, actions ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	sctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	if err := chromedp.Do(sctx, actions...); err != nil {
		text, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`document.getElementById('terminal').innerText + '\n' + document.getElementById('term-status').textContent`))
		t.Fatalf("%s: %v; the terminal shows:\n%s", name, err, text)
	}
}

// until waits until the expression is true.
func until(expr string) chromedp.Action[chromedp.Void] {
	poll := chromedp.Poll[bool](expr, chromedp.WithPollingInterval(50*time.Millisecond))
	return chromedp.Func(func(ctx context.Context, t *chromedp.Target) error {
		_, err := poll(ctx, t)
		return err
	})
}

// sizeJS is the terminal's size on the page, as stty prints it (rows,
// then columns), joined by an x.
const sizeJS = `(() => { const d = document.getElementById('terminal').dataset; return d.rows + "x" + d.cols; })()`

// pageSize evaluates sizeJS.
func pageSize(t *testing.T, ctx context.Context) string {
	t.Helper()
	size, err := chromedp.Run(ctx, chromedp.Evaluate[string](sizeJS))
	if err != nil {
		t.Fatal(err)
	}
	return size
}

// A user signs in, opens the terminal of a lease from its page, types a
// command and sees its output.
func TestTerminalInBrowser(t *testing.T) {
	ctx := headless(t)
	s := newBoxSite(t)
	alice := s.token("alice", "acme")
	l := s.boxLease(alice)

	step(t, ctx, "sign in",
		chromedp.Navigate(s.url+"/portal/login"),
		chromedp.WaitVisible("#token"),
		chromedp.SendKeys("#token", alice),
		chromedp.Click("#signin"),
		chromedp.WaitVisible("#leases"),
	)
	step(t, ctx, "open the terminal",
		chromedp.Navigate(s.url+"/portal/leases/"+l.ID),
		chromedp.WaitVisible("#terminal-link"),
		chromedp.Click("#terminal-link"),
		chromedp.WaitVisible("#terminal"),
		textContains("#term-status", "Connected."),
	)
	step(t, ctx, "run a command",
		chromedp.SendKeys("#terminal", "echo crab$((6*7))"+kb.Enter),
		textContains("#terminal", "crab42"),
	)
	// A smaller window is a smaller terminal, and the shell is told.
	before := pageSize(t, ctx)
	step(t, ctx, "resize the window",
		chromedp.EmulateViewport(640, 480),
		until(sizeJS+` != `+strconv.Quote(before)),
	)
	after := pageSize(t, ctx)
	termStep(t, ctx, "see the shell's new size",
		chromedp.SendKeys("#terminal", "stty size | tr ' ' x"+kb.Enter),
		textContains("#terminal", after),
	)
	termStep(t, ctx, "see colours",
		chromedp.SendKeys("#terminal", `printf '\033[31mred\033[0m \033[1;32mgreen\033[0m\n'`+kb.Enter),
		until(`[...document.querySelectorAll('#terminal span.f1')].some(s => s.textContent === 'red') && [...document.querySelectorAll('#terminal span.f2.bold')].some(s => s.textContent === 'green')`),
	)
	// A paste is sent as typed (in brackets, as the shell asked: it
	// waits for Enter).
	termStep(t, ctx, "paste",
		chromedp.Focus("#terminal"),
		chromedp.Evaluate[chromedp.Void](`(() => { const d = new DataTransfer(); d.setData('text/plain', 'echo pasted$((1+1))'); document.getElementById('terminal').dispatchEvent(new ClipboardEvent('paste', {clipboardData: d, bubbles: true})); })()`),
		chromedp.SendKeys("#terminal", kb.Enter),
		textContains("#terminal", "pasted2"),
	)
	step(t, ctx, "exit",
		chromedp.SendKeys("#terminal", "exit 5"+kb.Enter),
		textContains("#term-status", "The shell exited with code 5."),
	)
}

// The terminal's websocket is forwarded for the portal's own pages only:
// an upgrade from another origin, or without one, is refused; a
// same-origin one reaches the API's terminal, and one without a session
// does not.
func TestTerminalSocketOrigin(t *testing.T) {
	s := newBoxSite(t)
	alice := s.token("alice", "acme")
	l := s.boxLease(alice)
	b := s.browser()
	b.login(alice)
	u, _ := http.NewRequest(http.MethodGet, s.url, nil)
	cookies := b.hc.Jar.Cookies(u.URL)
	wsURL := "ws" + strings.TrimPrefix(s.url, "http") + "/portal/leases/" + l.ID + "/terminal/ws?cols=90&rows=20"

	for name, origin := range map[string]string{
		"another site":   "http://evil.example",
		"another port":   "http://127.0.0.1:1",
		"no origin":      "",
		"scheme-less":    strings.TrimPrefix(s.url, "http://"),
		"opaque (null)":  "null",
		"origin of http": "http://" + strings.TrimPrefix(s.url, "http://") + ".evil.example",
	} {
		h := http.Header{}
		for _, c := range cookies {
			h.Add("Cookie", c.String())
		}
		if origin != "" {
			h.Set("Origin", origin)
		}
		ws, resp, err := websocket.Dial(t.Context(), wsURL, &websocket.DialOptions{HTTPHeader: h})
		if err == nil {
			ws.CloseNow()
			t.Errorf("%s: upgrade accepted", name)
			continue
		}
		if resp == nil || resp.StatusCode != http.StatusForbidden {
			t.Errorf("%s: %v, want 403", name, err)
		}
	}

	h := http.Header{"Origin": {s.url}}
	for _, c := range cookies {
		h.Add("Cookie", c.String())
	}
	ws, _, err := websocket.Dial(t.Context(), wsURL, &websocket.DialOptions{HTTPHeader: h})
	if err != nil {
		t.Fatalf("same-origin upgrade: %v", err)
	}
	defer ws.CloseNow()
	if err := ws.Write(t.Context(), websocket.MessageBinary, []byte("echo crab$((6*7))\r")); err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	for !strings.Contains(out.String(), "crab42") {
		typ, data, err := ws.Read(t.Context())
		if err != nil {
			t.Fatalf("terminal ended before crab42: %v; output %q", err, out.String())
		}
		if typ == websocket.MessageBinary {
			out.Write(data)
		}
	}
	ws.Close(websocket.StatusNormalClosure, "")

	// Signed out, the socket is not forwarded.
	_, resp, err := websocket.Dial(t.Context(), wsURL, &websocket.DialOptions{HTTPHeader: http.Header{"Origin": {s.url}}})
	if err == nil || resp == nil || resp.StatusCode == http.StatusSwitchingProtocols {
		t.Errorf("upgrade without a session: %v", err)
	}
}

// The lease page links the terminal for whoever may use the box; the
// terminal page of an ended lease says there is no box.
func TestTerminalPage(t *testing.T) {
	s := newBoxSite(t)
	alice := s.token("alice", "acme")
	l := s.boxLease(alice)
	b := s.browser()
	b.login(alice)
	if r := b.get("/portal/leases/" + l.ID); !strings.Contains(r.body, `href="/portal/leases/`+l.ID+`/terminal"`) {
		t.Errorf("lease page has no terminal link:\n%s", r.body)
	}
	r := b.get("/portal/leases/" + l.ID + "/terminal")
	if r.status != http.StatusOK || !strings.Contains(r.body, `<script src="/portal/static/terminal.js" defer></script>`) ||
		!strings.Contains(r.body, `data-ws="/portal/leases/`+l.ID+`/terminal/ws"`) {
		t.Errorf("terminal page %d:\n%s", r.status, r.body)
	}
	if js := b.get("/portal/static/terminal.js"); js.status != http.StatusOK || js.header.Get("Content-Type") != "text/javascript; charset=utf-8" {
		t.Errorf("terminal.js: %d %s", js.status, js.header.Get("Content-Type"))
	}

	if _, err := s.api(alice).Release(t.Context(), l.ID, api.ReleaseRequest{}); err != nil {
		t.Fatal(err)
	}
	if r := b.get("/portal/leases/" + l.ID); strings.Contains(r.body, "/terminal") {
		t.Errorf("released lease's page links a terminal:\n%s", r.body)
	}
	if r := b.get("/portal/leases/" + l.ID + "/terminal"); r.status != http.StatusConflict || !strings.Contains(r.body, "there is no box to open a terminal on") {
		t.Errorf("terminal page of a released lease: %d\n%s", r.status, r.body)
	}
}

// screenState is a terminal screen as the emulator test reads it: its
// lines (trailing blanks trimmed), the cursor, and what it sent back.
type screenState struct {
	Lines   []string `json:"lines"`
	X       int      `json:"x"`
	Y       int      `json:"y"`
	Replies string   `json:"replies"`
	Gone    []string `json:"gone"` // lines scrolled into the history
	Attrs   []int    `json:"attrs"`
}

// The emulator of terminal.js, fed control sequences on a 10x3 screen.
func TestTerminalEmulator(t *testing.T) {
	ctx := headless(t)
	s := newSite(t, false)
	step(t, ctx, "load the emulator",
		chromedp.Navigate(s.url+"/portal/login"),
		chromedp.Evaluate[chromedp.Void](`(() => { const sc = document.createElement('script'); sc.src = '/portal/static/terminal.js'; document.head.append(sc); })()`),
		until(`!!window.crabboxTerminal`),
	)
	const (
		plain = 16 | 16<<5
		bold  = 1 << 10
	)
	tests := []struct {
		name, in string
		want     screenState
	}{
		{"text", "hello", screenState{Lines: []string{"hello", "", ""}, X: 5}},
		{"CR LF", "ab\r\ncd", screenState{Lines: []string{"ab", "cd", ""}, X: 2, Y: 1}},
		{"wrap", "0123456789AB", screenState{Lines: []string{"0123456789", "AB", ""}, X: 2, Y: 1}},
		{"no wrap until the next character", "0123456789", screenState{Lines: []string{"0123456789", "", ""}, X: 9}},
		{"scroll", "1\r\n2\r\n3\r\n4", screenState{Lines: []string{"2", "3", "4"}, X: 1, Y: 2, Gone: []string{"1"}}},
		{"backspace", "abc\b\bX", screenState{Lines: []string{"aXc", "", ""}, X: 2}},
		{"tab", "a\tb", screenState{Lines: []string{"a       b", "", ""}, X: 9}},
		{"CUP and EL", "aaaaaaaaaa\x1b[1;4H\x1b[K", screenState{Lines: []string{"aaa", "", ""}, X: 3}},
		{"EL 1 and 2", "abcdef\x1b[1;3H\x1b[1K\r\nghi\x1b[2K", screenState{Lines: []string{"   def", "", ""}, X: 3, Y: 1}},
		{"ED 0", "abcdef\r\nghi\x1b[1;3H\x1b[J", screenState{Lines: []string{"ab", "", ""}, X: 2}},
		{"ED 2", "abc\r\ndef\x1b[2J", screenState{Lines: []string{"", "", ""}, X: 3, Y: 1}},
		{"CUU CUD CUF CUB", "\x1b[2Bx\x1b[Ay\x1b[3Cz\x1b[2Dw", screenState{Lines: []string{"", " y  wz", "x"}, X: 5, Y: 1}},
		{"moves stop at the edges", "\x1b[9A\x1b[99C!\x1b[99B", screenState{Lines: []string{"         !", "", ""}, X: 9, Y: 2}},
		{"CHA and VPA", "\x1b[5G5\x1b[3d3", screenState{Lines: []string{"    5", "", "     3"}, X: 6, Y: 2}},
		{"ICH and DCH", "abcdef\x1b[1;2H\x1b[2P\r\nabc\x1b[2;2H\x1b[2@", screenState{Lines: []string{"adef", "a  bc", ""}, X: 1, Y: 1}},
		{"IL", "1\r\n2\r\n3\x1b[2;1H\x1b[L", screenState{Lines: []string{"1", "", "2"}, Y: 1}},
		{"DL", "1\r\n2\r\n3\x1b[1;1H\x1b[M", screenState{Lines: []string{"2", "3", ""}}},
		{"reverse index", "a\x1b[1;1H\x1bM", screenState{Lines: []string{"", "a", ""}}},
		{"scrolling region", "\x1b[2;3r\x1b[1;1HA\x1b[2;1HB\r\nC\r\nD", screenState{Lines: []string{"A", "C", "D"}, X: 1, Y: 2}},
		{"alternate screen", "main\x1b[?1049hALT\x1b[?1049l", screenState{Lines: []string{"main", "", ""}, X: 4}},
		{"save and restore", "ab\x1b7\x1b[3;5Hx\x1b8c", screenState{Lines: []string{"abc", "", "    x"}, X: 3}},
		{"SGR", "\x1b[1;31mR\x1b[0mN\x1b[38;5;9mB\x1b[44mL", screenState{Lines: []string{"RNBL", "", ""}, X: 4, Attrs: []int{1 | 16<<5 | bold, plain, 9 | 16<<5, 9 | 4<<5}}},
		{"status report", "ab\x1b[6n\x1b[5n", screenState{Lines: []string{"ab", "", ""}, X: 2, Replies: "\x1b[1;3R\x1b[0n"}},
		{"OSC and charsets ignored", "\x1b]0;title\x07o\x1b]2;t\x1b\\k\x1b(B!", screenState{Lines: []string{"ok!", "", ""}, X: 3}},
		{"unknown sequences ignored", "a\x1b[?2004h\x1b[>4;1m\x1b[2 qb", screenState{Lines: []string{"ab", "", ""}, X: 2}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in, _ := json.Marshal(tt.in)
			raw, err := chromedp.Run(ctx, chromedp.Evaluate[string](`(() => {
				let replies = '';
				const gone = [];
				const s = new window.crabboxTerminal.Screen(10, 3, (r) => { replies += r; }, (l) => gone.push(l.ch.join('').trimEnd()));
				s.write(`+string(in)+`);
				const out = {lines: s.lines.map((l) => l.ch.join('').trimEnd()), x: s.x, y: s.y, replies, gone: gone.length ? gone : null, attrs: null};
				if (`+strconv.Quote(tt.name)+` === 'SGR') out.attrs = s.lines[0].at.slice(0, 4);
				return JSON.stringify(out);
			})()`))
			if err != nil {
				t.Fatal(err)
			}
			var got screenState
			if err := json.Unmarshal([]byte(raw), &got); err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(tt.want, got); d != "" {
				t.Errorf("screen after %q (-want +got):\n%s", tt.in, d)
			}
		})
	}
}
