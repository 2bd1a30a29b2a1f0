package coordinator

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jonboulle/clockwork"
	"golang.org/x/crypto/ssh"

	"github.com/crabbox-dev/crabbox/coordinator/api"
	"github.com/crabbox-dev/crabbox/coordinator/auth"
	"github.com/crabbox-dev/crabbox/coordinator/store"
)

// A port preview serves an HTTP port of a brokered lease's box through the
// coordinator: /v1/leases/{id}/proxy/{port}/{path} is a request for
// 127.0.0.1:{port}/{path} on the box, sent over an SSH connection the
// coordinator makes with its access key (dialBox). Websocket upgrades
// pass through.
//
// The box's pages are served from the coordinator's origin, so they are
// kept from its authority: the request loses its Authorization header and
// its cookies (the portal's session among them) before it reaches the
// box, the box's Set-Cookie headers are dropped, and every answer carries
// a Content-Security-Policy sandbox without allow-same-origin, so the
// browser runs the box's scripts in an opaque origin that cannot read the
// coordinator's cookies or call its API as the signed-in user.

// previewCSP is the policy every preview answer carries.
const previewCSP = "sandbox allow-scripts allow-forms allow-popups allow-modals allow-downloads"

const (
	// previewIdle is how long a box's cached connection stays open with
	// no preview request using it.
	previewIdle = time.Minute
	// maxPreviewBoxes bounds the boxes with a cached connection.
	maxPreviewBoxes = 64
)

// proxyPort serves a preview request (any method).
func (s *Server) proxyPort(w http.ResponseWriter, r *http.Request, id auth.Identity) *apiError {
	port, err := strconv.Atoi(r.PathValue("port"))
	if err != nil || port < 1 || port > 65535 {
		return invalid("port %s: want a number from 1 to 65535", quote(r.PathValue("port")))
	}
	l, _, e := s.leaseFor(r, id, r.PathValue("id"), roleUse)
	if e != nil {
		return e
	}
	if !l.State.Live() {
		return conflict(api.CodeLeaseEnded, "lease %s is %s: its box cannot be previewed", l.ID, l.State)
	}
	if !strings.HasSuffix(r.Pattern, "{rest...}") {
		// Relative links of the box's pages resolve against the port's
		// directory.
		http.Redirect(w, r, r.URL.Path+"/"+queryOf(r), http.StatusSeeOther)
		return nil
	}
	ctx, done, ok := s.bridges.open(r.Context(), l.ID, id, roleUse)
	if !ok {
		return errorf(http.StatusServiceUnavailable, api.CodeUnavailable, "the coordinator is shutting down")
	}
	defer done()
	box, release, err := s.previews.take(ctx, s, l)
	if err != nil {
		if errors.Is(err, errNoAccess) {
			return errorf(http.StatusBadGateway, api.CodeProviderFailed, "preview of lease %s: %v", l.ID, err)
		}
		if errors.Is(err, errPreviewsBusy) {
			return errorf(http.StatusServiceUnavailable, api.CodeUnavailable, "%v", err)
		}
		s.log.Warn("preview: connect to the box", "lease", l.ID, "err", err)
		return errorf(http.StatusBadGateway, api.CodeProviderFailed, "preview of lease %s: the coordinator could not connect to its box", l.ID)
	}
	defer release()
	target := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.Out.URL.Scheme, pr.Out.URL.Host = "http", target
			pr.Out.URL.Path, pr.Out.URL.RawPath = "/"+r.PathValue("rest"), ""
			pr.Out.URL.RawQuery = r.URL.RawQuery
			pr.Out.Host = target
			for _, h := range []string{"Authorization", "Cookie", "Proxy-Authorization"} {
				pr.Out.Header.Del(h)
			}
		},
		Transport:      box.transport,
		ErrorLog:       slog.NewLogLogger(s.log.Handler(), slog.LevelDebug),
		ModifyResponse: previewHeaders,
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			if r.Context().Err() != nil {
				return // the client left, or access was revoked
			}
			writeError(w, errorf(http.StatusBadGateway, api.CodeProviderFailed, "preview of lease %s: port %d on the box did not answer: %s", l.ID, port, boxError(err)))
		},
	}
	rp.ServeHTTP(w, r.WithContext(ctx))
	return nil
}

// queryOf is r's query with its "?", or "".
func queryOf(r *http.Request) string {
	if r.URL.RawQuery == "" {
		return ""
	}
	return "?" + r.URL.RawQuery
}

// previewHeaders keeps the box's answer from acting on the coordinator's
// origin: no cookies, and the sandbox policy.
func previewHeaders(resp *http.Response) error {
	resp.Header.Del("Set-Cookie")
	resp.Header.Del("Set-Cookie2")
	resp.Header.Add("Content-Security-Policy", previewCSP)
	resp.Header.Set("X-Content-Type-Options", "nosniff")
	resp.Header.Set("Referrer-Policy", "no-referrer")
	return nil
}

// boxError says why a port did not answer, without the transport's
// wrapping.
func boxError(err error) string {
	var oce *ssh.OpenChannelError
	if errors.As(err, &oce) {
		return "connect failed (" + oce.Message + ")"
	}
	return err.Error()
}

// errPreviewsBusy: every cached connection is in use.
var errPreviewsBusy = errors.New("too many boxes are being previewed at once; try again shortly")

// previewBoxes are the coordinator's cached SSH connections to boxes for
// previews, one per lease: made on a lease's first preview request, closed
// after previewIdle without one, when the lease ends (its bridge is
// revoked), when the connection breaks, and when the server shuts down.
type previewBoxes struct {
	mu   sync.Mutex
	byID map[string]*previewBox
}

// previewBox is one lease's cached connection.
type previewBox struct {
	leaseID   string
	client    *ssh.Client
	transport *http.Transport
	users     int             // requests using it now
	idle      clockwork.Timer // running while users is 0
	unbridge  func()          // ends its bridge
	closed    bool
}

// take returns lease l's cached connection, making it if needed; release
// ends this request's use of it.
func (p *previewBoxes) take(ctx context.Context, s *Server, l store.Lease) (*previewBox, func(), error) {
	if b := p.use(l.ID); b != nil {
		return b, func() { p.release(s, b) }, nil
	}
	if !p.room() {
		return nil, nil, errPreviewsBusy
	}
	client, err := s.dialBox(ctx, l)
	if err != nil {
		return nil, nil, err
	}
	// The connection lives while the lease does: its bridge is the
	// owner's, which recheck revokes when the lease ends.
	bctx, unbridge, ok := s.bridges.open(context.Background(), l.ID, auth.Identity{Owner: l.Owner, Org: l.Org}, roleUse)
	if !ok {
		client.Close()
		return nil, nil, errors.New("the coordinator is shutting down")
	}
	b := &previewBox{leaseID: l.ID, client: client, unbridge: unbridge, users: 1}
	b.transport = &http.Transport{
		DialContext: func(ctx context.Context, _, addr string) (net.Conn, error) {
			return client.DialContext(ctx, "tcp", addr)
		},
		MaxIdleConnsPerHost: 8,
		IdleConnTimeout:     previewIdle,
		DisableCompression:  true,
	}
	p.mu.Lock()
	if old := p.byID[l.ID]; old != nil {
		// Another request made one meanwhile: use that.
		old.users++
		stopIdle(old)
		p.mu.Unlock()
		p.shut(b)
		return old, func() { p.release(s, old) }, nil
	}
	if p.byID == nil {
		p.byID = map[string]*previewBox{}
	}
	p.byID[l.ID] = b
	p.mu.Unlock()
	context.AfterFunc(bctx, func() { p.drop(b) })
	go func() {
		client.Wait()
		p.drop(b)
	}()
	return b, func() { p.release(s, b) }, nil
}

// use counts a request on lease id's cached connection, if there is one.
func (p *previewBoxes) use(id string) *previewBox {
	p.mu.Lock()
	defer p.mu.Unlock()
	b := p.byID[id]
	if b == nil {
		return nil
	}
	b.users++
	stopIdle(b)
	return b
}

// room makes room for one more cached connection, closing an idle one if
// the cache is full; false when all are in use.
func (p *previewBoxes) room() bool {
	p.mu.Lock()
	if len(p.byID) < maxPreviewBoxes {
		p.mu.Unlock()
		return true
	}
	var victim *previewBox
	for _, b := range p.byID {
		if b.users == 0 {
			victim = b
			break
		}
	}
	p.mu.Unlock()
	if victim == nil {
		return false
	}
	p.drop(victim)
	return true
}

func stopIdle(b *previewBox) {
	if b.idle != nil {
		b.idle.Stop()
		b.idle = nil
	}
}

// release ends a request's use of b; the last one starts its idle timer.
func (p *previewBoxes) release(s *Server, b *previewBox) {
	p.mu.Lock()
	defer p.mu.Unlock()
	b.users--
	if b.users == 0 && !b.closed {
		b.idle = s.clock.AfterFunc(previewIdle, func() { p.dropIdle(b) })
	}
}

// dropIdle closes b if it is still idle.
func (p *previewBoxes) dropIdle(b *previewBox) {
	p.mu.Lock()
	idle := b.users == 0
	p.mu.Unlock()
	if idle {
		p.drop(b)
	}
}

// drop removes b from the cache and closes it (requests using it fail).
func (p *previewBoxes) drop(b *previewBox) {
	p.mu.Lock()
	if b.closed {
		p.mu.Unlock()
		return
	}
	b.closed = true
	stopIdle(b)
	if p.byID[b.leaseID] == b {
		delete(p.byID, b.leaseID)
	}
	p.mu.Unlock()
	p.shut(b)
}

func (p *previewBoxes) shut(b *previewBox) {
	b.transport.CloseIdleConnections()
	b.client.Close()
	b.unbridge()
}

// cached is how many boxes have a cached preview connection.
func (p *previewBoxes) cached() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.byID)
}
