package crabbox

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	gosync "sync"
	"time"
	"unicode/utf8"

	"golang.org/x/crypto/ssh"

	coordbroker "github.com/crabbox-dev/crabbox/coordinator/broker"

	"github.com/crabbox-dev/crabbox/coordinator/api"
	coordclient "github.com/crabbox-dev/crabbox/coordinator/client"
	"github.com/crabbox-dev/crabbox/lease"
	"github.com/crabbox-dev/crabbox/provider"
)

// BrokerMode says which leases go through a coordinator once one is
// configured (WithCoordinator).
type BrokerMode string

const (
	// BrokerManaged (the default): leases of providers that declare
	// coordinator support, and of providers this program does not link, are
	// created, heartbeated and released through the coordinator, which holds
	// the provider credentials. Other providers run direct.
	BrokerManaged BrokerMode = "managed"
	// BrokerAll: every lease goes through the coordinator; the coordinator
	// must be configured with the provider.
	BrokerAll BrokerMode = "all"
	// BrokerRegistered: every provider runs direct, and its leases are
	// registered with the coordinator (inventory only; the coordinator never
	// calls the provider).
	BrokerRegistered BrokerMode = "registered"
)

// ParseBrokerMode parses a broker mode name; empty is BrokerManaged.
func ParseBrokerMode(s string) (BrokerMode, error) {
	switch m := BrokerMode(s); m {
	case "":
		return BrokerManaged, nil
	case BrokerManaged, BrokerAll, BrokerRegistered:
		return m, nil
	}
	return "", fmt.Errorf("coordinator mode %q: want managed, all or registered", s)
}

// WithCoordinator brokers leases through the coordinator at url,
// authenticating with token (see BrokerMode for which leases). SSH, sync
// and commands still go straight from this client to the box; each Run is
// recorded with the coordinator as a run with events, exit code, timings
// and its log. Plain http is accepted for loopback URLs only.
//
// Take url and token from the environment or the caller, never from a
// repository's config file, which could send the token elsewhere.
func WithCoordinator(url, token string) Option {
	return func(o *options) { o.broker.url, o.broker.token = url, token }
}

// WithCoordinatorClient is WithCoordinator with a client built by the
// caller (for example with coordclient.AllowInsecureHTTP).
func WithCoordinatorClient(cl *coordclient.Client) Option {
	return func(o *options) { o.broker.client = cl }
}

// WithBrokerMode sets which leases go through the coordinator (default
// BrokerManaged). It matters only with WithCoordinator.
func WithBrokerMode(m BrokerMode) Option { return func(o *options) { o.broker.mode = m } }

type brokerOptions struct {
	url, token string
	client     *coordclient.Client
	mode       BrokerMode
}

// broker is a client's coordinator connection and its backends.
type broker struct {
	coord *coordclient.Client
	mode  BrokerMode
	// heartbeats sends the backends' lease heartbeats over the
	// coordinator's control websocket (HTTP without one); Client.Close
	// closes it.
	heartbeats *coordclient.Heartbeater

	mu       gosync.Mutex
	backends map[string]provider.SSHLeaseBackend
}

// setupBroker connects the client to its coordinator, if one is configured.
func (c *Client) setupBroker(o brokerOptions) error {
	cl := o.client
	if cl == nil {
		if o.url == "" && o.token == "" {
			if o.mode != "" {
				return errors.New("coordinator mode set without a coordinator (set CRABBOX_COORDINATOR)")
			}
			return nil
		}
		if o.url == "" {
			return errors.New("coordinator token set without a coordinator URL (set CRABBOX_COORDINATOR)")
		}
		copts := []coordclient.Option{coordclient.WithClock(c.rt.Clock)}
		if t := c.rt.HTTPClient.Transport; t != nil {
			copts = append(copts, coordclient.WithTransport(t))
		}
		var err error
		cl, err = coordclient.New(o.url, o.token, copts...)
		if err != nil {
			return err
		}
	}
	mode, err := ParseBrokerMode(string(o.mode))
	if err != nil {
		return err
	}
	c.broker = &broker{coord: cl, mode: mode, heartbeats: cl.NewHeartbeater(), backends: map[string]provider.SSHLeaseBackend{}}
	return nil
}

// brokerFor returns the backend for the named provider's leases when the
// coordinator has a part in them: brokered, or direct and registered. ok is
// false when the provider runs direct without the coordinator.
func (c *Client) brokerFor(name string) (b provider.SSHLeaseBackend, ok bool, err error) {
	if name == "" {
		name = c.provider
	}
	p, lookupErr := c.registry.Lookup(name)
	linked := lookupErr == nil
	canonical := name
	if linked {
		canonical = p.Spec().Name
	}
	mode := c.broker.mode
	if mode == BrokerManaged && linked && p.Spec().Coordinator != provider.CoordinatorSupported {
		return nil, false, nil
	}
	if mode == BrokerRegistered && !linked {
		return nil, true, lookupErr
	}
	if mode != BrokerRegistered {
		b, err := c.brokered(name)
		return b, true, err
	}
	c.broker.mu.Lock()
	defer c.broker.mu.Unlock()
	if b, ok := c.broker.backends[canonical]; ok {
		return b, true, nil
	}
	direct, err := c.Backend(canonical)
	if err != nil {
		return nil, true, err
	}
	sb, isSSH := direct.(provider.SSHLeaseBackend)
	if !isSSH {
		return nil, true, fmt.Errorf("provider %q runs commands itself (%s); it has no SSH leases", canonical, direct.Spec().Kind)
	}
	b = coordbroker.NewRegistered(sb, c.broker.coord, c.store, c.log, coordbroker.WithHeartbeater(c.broker.heartbeats))
	c.broker.backends[canonical] = b
	return b, true, nil
}

// brokered returns the backend of the named provider's leases brokered by
// the client's coordinator, whatever the broker mode.
func (c *Client) brokered(name string) (provider.SSHLeaseBackend, error) {
	canonical, linked := name, false
	if p, err := c.registry.Lookup(name); err == nil {
		canonical, linked = p.Spec().Name, true
	}
	key := "brokered\x00" + canonical
	c.broker.mu.Lock()
	defer c.broker.mu.Unlock()
	if b, ok := c.broker.backends[key]; ok {
		return b, nil
	}
	settings, err := coordbroker.Settings(canonical, c.configs[canonical], linked)
	if err != nil {
		return nil, err
	}
	b := coordbroker.NewBrokered(c.broker.coord, canonical, settings, c.store, c.rt.Clock,
		coordbroker.WithRegistry(c.registry), coordbroker.WithHeartbeater(c.broker.heartbeats))
	c.broker.backends[key] = b
	return b, nil
}

// Run recording.

const (
	// recordTimeout bounds each recording call and the final drain; they
	// run even after the run's context is cancelled.
	recordTimeout = 10 * time.Second
	// maxPendingOutput bounds output waiting to be sent as events; more is
	// dropped from the event stream (it stays in the log).
	maxPendingOutput = 1 << 20
	// maxEventFailures stops event streaming after this many failed posts
	// in a row.
	maxEventFailures = 3
)

// runRecorder mirrors one Client.Run to the coordinator: it creates the run
// before anything else happens (its ID is the run's ID, see RunResult.RunID),
// streams phase and output events in order, keeps the last api.MaxLogBytes
// of output, and finishes the run. Recording is best effort: a coordinator
// failure is logged and never fails the run.
type runRecorder struct {
	coord *coordclient.Client
	log   *slog.Logger
	ctx   context.Context // detached from the run's cancellation
	req   RunRequest
	// createErr is why the run could not be created at the coordinator.
	createErr error
	// sendCtx bounds the event sender; stopSend cancels it.
	sendCtx  context.Context
	stopSend context.CancelFunc

	mu       gosync.Mutex
	runID    string // the coordinator's run ID; empty if it was not created
	queue    []api.EventRequest
	pending  int // bytes of output in queue
	streamed int // bytes of output queued so far
	dropped  int
	closed   bool
	wake     chan struct{}
	done     chan struct{}
	logBuf   tailBuffer
}

// recordRun creates req's run at the coordinator, on held when the run
// uses a lease the caller holds (Lease.Run); the caller defers finish,
// and tees the run's output into the recorder with tee once req.RunID is
// settled.
func (c *Client) recordRun(ctx context.Context, req RunRequest, held *Lease) *runRecorder {
	r := &runRecorder{
		coord: c.broker.coord, log: c.log, ctx: context.WithoutCancel(ctx), req: req,
		wake: make(chan struct{}, 1), done: make(chan struct{}),
		logBuf: tailBuffer{max: api.MaxLogBytes},
	}
	r.sendCtx, r.stopSend = context.WithCancel(r.ctx)
	// Until the lease is known, the provider is the one a new lease would
	// have; the lease event corrects it.
	prov, leaseID := cmp.Or(req.Acquire.Provider, c.provider), ""
	switch {
	case held != nil:
		prov, leaseID = held.Provider(), r.coordinatorLease(held.Claim())
	case req.Lease != "":
		// A warm lease this machine holds names its provider; one made
		// elsewhere is named by the lease event once it is resolved.
		if cl, err := c.store.Find(req.Lease); err == nil {
			prov, leaseID = cl.Provider, r.coordinatorLease(cl)
		}
	}
	r.create(leaseID, prov)
	return r
}

// tee returns req with its output teed into the recorder and the lease
// reported to it.
func (r *runRecorder) tee(req RunRequest) RunRequest {
	r.req = req
	var mu gosync.Mutex
	req.Stdout = recordWriter{mu: &mu, w: req.Stdout, r: r, stream: api.StreamStdout}
	req.Stderr = recordWriter{mu: &mu, w: req.Stderr, r: r, stream: api.StreamStderr}
	req.onLease = r.leased
	return req
}

// coordinatorLease is cl's ID when the coordinator knows the lease
// (brokered by it or registered with it), else empty: a run names a direct
// lease only in its events' data.
func (r *runRecorder) coordinatorLease(cl lease.Claim) string {
	if (cl.Route == lease.RouteBrokered || cl.Route == lease.RouteRegistered) && cl.Coordinator == r.coord.URL() {
		return cl.ID
	}
	return ""
}

// recordWriter writes to the caller's writer and the recorder.
type recordWriter struct {
	mu     *gosync.Mutex
	w      io.Writer
	r      *runRecorder
	stream string
}

func (w recordWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.r.output(w.stream, p)
	if w.w == nil {
		return len(p), nil
	}
	return w.w.Write(p)
}

// leased reports the run's lease: its event ties the run to the lease
// when the coordinator knows the lease (brokered or registered), and
// names its provider either way.
func (r *runRecorder) leased(l *Lease) {
	leaseID, slug := r.coordinatorLease(l.Claim()), ""
	if leaseID != "" {
		slug = l.Slug()
	}
	data := map[string]string{"leaseID": l.ID(), "slug": l.Slug(), "provider": l.Provider()}
	if r.req.RunID != r.id() {
		data["localRunID"] = r.req.RunID // chosen by the caller (RunRequest.RunID)
	}
	r.event(api.EventRequest{
		Type: api.EventLease, Phase: api.PhaseLeasing,
		Message: fmt.Sprintf("lease %s (%s) from %s", l.ID(), l.Slug(), l.Provider()),
		Data:    mustJSON(data), LeaseID: leaseID, Slug: slug, Provider: l.Provider(),
	})
	if !r.req.NoSync {
		r.event(api.EventRequest{Type: api.EventPhase, Phase: api.PhaseSync})
	}
}

// create creates the run at the coordinator and starts the event sender;
// when it cannot, the run goes on unrecorded there (createErr says why).
func (r *runRecorder) create(leaseID, providerName string) {
	ctx, cancel := context.WithTimeout(r.ctx, recordTimeout)
	defer cancel()
	run, err := r.coord.CreateRun(ctx, api.RunRequest{
		LeaseID: leaseID, Provider: providerName, Target: api.TargetLinux,
		Command: recordedCommand(r.req), Label: r.req.ScriptName,
	})
	if err != nil {
		r.createErr = fmt.Errorf("record the run with coordinator %s: %w", r.coord.URL(), err)
		r.log.Warn("run not recorded with the coordinator; its ID is a local one", "err", err)
		close(r.done)
		return
	}
	r.log.Info("run recorded with the coordinator", "run", run.ID)
	r.runID = run.ID // before the sender starts; nothing else runs yet
	go r.send()
}

// recordedCommand is the run's command as the coordinator records it.
func recordedCommand(req RunRequest) []string {
	switch {
	case len(req.Command) > 0:
		return slices.Clone(req.Command)
	case req.Shell != "":
		return []string{"sh", "-c", req.Shell}
	}
	return []string{displayCommand(req)}
}

// output records a chunk of the command's output.
func (r *runRecorder) output(stream string, p []byte) {
	r.mu.Lock()
	defer r.mu.Unlock()
	_, _ = r.logBuf.Write(p)
	if r.runID == "" || r.closed {
		return
	}
	switch {
	case r.streamed >= api.MaxLogBytes:
		return
	case r.pending+len(p) > maxPendingOutput:
		r.dropped += len(p)
		return
	}
	r.streamed += len(p)
	r.pending += len(p)
	if n := len(r.queue); n > 0 {
		last := &r.queue[n-1]
		if last.Type == api.EventOutput && last.Stream == stream && len(last.Message)+len(p) <= api.MaxEventFieldBytes {
			last.Message += string(p)
			r.signal()
			return
		}
	}
	for len(p) > 0 {
		n := cutRunes(p, api.MaxEventFieldBytes)
		r.queue = append(r.queue, api.EventRequest{Type: api.EventOutput, Phase: api.PhaseCommand, Stream: stream, Message: string(p[:n])})
		p = p[n:]
	}
	r.signal()
}

// cutRunes returns how many bytes of p, at most max, end on a rune boundary.
func cutRunes(p []byte, max int) int {
	if len(p) <= max {
		return len(p)
	}
	n := max
	for n > max-utf8.UTFMax && n > 0 && !utf8.RuneStart(p[n]) {
		n--
	}
	if n == 0 {
		return max
	}
	return n
}

// event queues a phase or lifecycle event.
func (r *runRecorder) event(ev api.EventRequest) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.runID == "" || r.closed {
		return
	}
	r.queue = append(r.queue, ev)
	r.signal()
}

func (r *runRecorder) signal() {
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// send posts queued events in order until the recorder is closed and the
// queue is empty.
func (r *runRecorder) send() {
	defer close(r.done)
	failures := 0
	for {
		r.mu.Lock()
		batch := r.queue
		r.queue, r.pending = nil, 0
		closed, runID := r.closed, r.runID
		r.mu.Unlock()
		for _, ev := range batch {
			if failures >= maxEventFailures {
				break
			}
			ctx, cancel := context.WithTimeout(r.sendCtx, recordTimeout)
			ev.Message = storableText(ev.Message)
			_, err := r.coord.AppendEvent(ctx, runID, ev)
			cancel()
			if err != nil {
				failures++
				r.log.Warn("run event not recorded", "run", runID, "err", err)
				continue
			}
			failures = 0
		}
		if closed && len(batch) == 0 {
			return
		}
		if !closed {
			<-r.wake
		}
	}
}

// id is the coordinator's run ID, empty when it did not record the run
// (or there is no recorder).
func (r *runRecorder) id() string {
	if r == nil {
		return ""
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.runID
}

// finish records the run's outcome.
func (r *runRecorder) finish(res RunResult, runErr error) {
	defer r.stopSend()
	if runErr != nil {
		r.event(api.EventRequest{Type: api.EventError, Message: truncate(runErr.Error(), api.MaxEventFieldBytes)})
	}
	if !r.req.SyncOnly && runErr == nil {
		r.event(api.EventRequest{
			Type: api.EventCommand, Phase: api.PhaseCommand,
			Message: fmt.Sprintf("exit %d", res.ExitCode),
			Data:    mustJSON(map[string]any{"exitCode": res.ExitCode, "timedOut": res.TimedOut, "commandMs": res.Timing.Command.Milliseconds()}),
		})
	}
	if res.LeaseID != "" {
		msg := "lease released"
		switch {
		case res.Kept:
			msg = "lease kept"
		case res.ReleaseErr != nil:
			msg = truncate("lease not released (left for cleanup): "+res.ReleaseErr.Error(), api.MaxEventFieldBytes)
		}
		r.event(api.EventRequest{Type: api.EventLease, Phase: api.PhaseRelease, Message: msg,
			Data: mustJSON(map[string]any{"leaseID": res.LeaseID, "kept": res.Kept})})
	}
	r.mu.Lock()
	runID, dropped := r.runID, r.dropped
	if dropped > 0 {
		r.queue = append(r.queue, api.EventRequest{Type: api.EventOutput, Message: fmt.Sprintf("%d bytes of output not streamed (see the log)", dropped)})
	}
	r.closed = true
	logText, truncated := r.logBuf.String()
	r.mu.Unlock()
	if runID == "" {
		return
	}
	r.signal()
	drain, cancelDrain := context.WithTimeout(r.ctx, recordTimeout)
	select {
	case <-r.done:
	case <-drain.Done():
		r.log.Warn("run events not all recorded in time", "run", runID)
		r.stopSend()
		<-r.done
	}
	cancelDrain()
	ctx, cancel := context.WithTimeout(r.ctx, recordTimeout)
	defer cancel()
	exit := res.ExitCode
	if runErr != nil && exit == 0 {
		exit = exitCrabboxFailure
	}
	fin := api.FinishRequest{
		ExitCode: exit, SyncMs: res.Timing.Sync.Milliseconds(), CommandMs: res.Timing.Command.Milliseconds(),
		Log: logText, LogTruncated: truncated,
	}
	if res.JUnit != nil {
		fin.Results = &api.RunResults{Tests: res.JUnit.Tests, Failures: res.JUnit.Failures, Errors: res.JUnit.Errors, Skipped: res.JUnit.Skipped}
	}
	if _, err := r.coord.FinishRun(ctx, runID, fin); err != nil {
		r.log.Warn("run outcome not recorded with the coordinator", "run", runID, "err", err)
	}
}

// exitCrabboxFailure is the exit code recorded for a run that failed in
// crabbox itself (lease, connection, sync) before the command's own exit
// status was known, as ssh(1) does.
const exitCrabboxFailure = 255

// mustJSON encodes v for an event's data, which is a string on the wire.
func mustJSON(v any) string {
	b, _ := json.Marshal(v) // only maps of strings, numbers and booleans: never fails
	return string(b)
}

// storableText makes command output storable as an event message: the
// coordinator refuses NUL bytes and invalid UTF-8 (no store takes them),
// so each becomes "?", which never makes the message longer.
func storableText(s string) string {
	return strings.ReplaceAll(strings.ToValidUTF8(s, "?"), "\x00", "?")
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:cutRunes([]byte(s), n)]
}

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	max       int
	buf       []byte
	truncated bool
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	if len(p) >= t.max {
		t.buf, t.truncated = append(t.buf[:0], p[len(p)-t.max:]...), t.truncated || len(p) > t.max || len(t.buf) > 0
		return len(p), nil
	}
	// Reslicing drops the oldest bytes; append copies only the live ones
	// when it grows, so memory stays a small multiple of max.
	t.buf = append(t.buf, p...)
	if over := len(t.buf) - t.max; over > 0 {
		t.buf, t.truncated = t.buf[over:], true
	}
	return len(p), nil
}

func (t *tailBuffer) String() (string, bool) { return string(t.buf), t.truncated }

// ErrNoCoordinator is the error of a call that needs a coordinator on a
// client without one (see WithCoordinator).
var ErrNoCoordinator = fmt.Errorf("no coordinator configured (set CRABBOX_COORDINATOR and CRABBOX_COORDINATOR_TOKEN, or sign in with crabbox login): %w", provider.ErrPrecondition)

// coordinator returns the client's coordinator, or an error saying what
// needed one.
func (c *Client) coordinator(ctx context.Context, what string) (*coordclient.Client, error) {
	if err := c.ready(ctx, what); err != nil {
		return nil, err
	}
	if c.broker == nil {
		return nil, fmt.Errorf("%s: %w", what, ErrNoCoordinator)
	}
	return c.broker.coord, nil
}

// ShareChange grants a coordinator lease to more people (Client.ShareLease).
type ShareChange struct {
	// Users are owner identities (github:12345, or a shared token's
	// owner) granted Role; a user already shared with gets Role instead.
	Users []string
	// Org grants Role to every user of the lease's org.
	Org bool
	// Role is what they are granted; empty is api.ShareRead.
	Role api.ShareRole
}

// LeaseShare returns who the coordinator lease ref (an ID or slug) is
// shared with. Its owner, an admin or a user it is shared with to manage
// may ask.
func (c *Client) LeaseShare(ctx context.Context, ref string) (api.ShareResponse, error) {
	coord, err := c.coordinator(ctx, "share of lease "+ref)
	if err != nil {
		return api.ShareResponse{}, err
	}
	return coord.LeaseShare(ctx, ref)
}

// ShareLease adds the grants of ch to the coordinator lease ref's share,
// keeping the others, and returns the share the coordinator stored. A
// change that names nobody, an empty user or an unknown role is refused
// before anything is sent.
func (c *Client) ShareLease(ctx context.Context, ref string, ch ShareChange) (api.ShareResponse, error) {
	what := "share lease " + ref
	role := cmp.Or(ch.Role, api.ShareRead)
	switch {
	case !role.Valid():
		return api.ShareResponse{}, fmt.Errorf("%s: role %q: want read, use or manage", what, ch.Role)
	case len(ch.Users) == 0 && !ch.Org:
		return api.ShareResponse{}, fmt.Errorf("%s: name users or the org to share with", what)
	}
	add := api.LeaseShare{Users: map[string]api.ShareRole{}}
	for _, u := range ch.Users {
		add.Users[u] = role
	}
	if _, err := add.Normalize(); err != nil {
		return api.ShareResponse{}, fmt.Errorf("%s: %w", what, err)
	}
	coord, err := c.coordinator(ctx, what)
	if err != nil {
		return api.ShareResponse{}, err
	}
	cur, err := coord.LeaseShare(ctx, ref)
	if err != nil {
		return api.ShareResponse{}, fmt.Errorf("%s: %w", what, err)
	}
	next := api.LeaseShare{Users: map[string]api.ShareRole{}, Org: cur.Share.Org}
	for u, r := range cur.Share.Users {
		next.Users[u] = r
	}
	for _, u := range ch.Users {
		next.Users[api.NormalizeShareUser(u)] = role
	}
	if ch.Org {
		next.Org = role
	}
	if next, err = next.Normalize(); err != nil {
		return api.ShareResponse{}, fmt.Errorf("%s: %w", what, err)
	}
	out, err := coord.UpdateLeaseShare(ctx, ref, next)
	if err != nil {
		return api.ShareResponse{}, fmt.Errorf("%s: %w", what, err)
	}
	return out, nil
}

// Unshare takes grants of a coordinator lease back (Client.UnshareLease).
type Unshare struct {
	// Users lose their own grant (an org grant still covers them while
	// Org is not removed too).
	Users []string
	// Org removes the grant to the lease's org.
	Org bool
	// All removes every grant; Users and Org are then ignored.
	All bool
}

// UnshareLease removes the grants u names from the coordinator lease ref's
// share and returns what is left. Access through a removed grant ends at
// once, open terminals and tunnels included.
func (c *Client) UnshareLease(ctx context.Context, ref string, u Unshare) (api.ShareResponse, error) {
	what := "unshare lease " + ref
	if !u.All && len(u.Users) == 0 && !u.Org {
		return api.ShareResponse{}, fmt.Errorf("%s: name users, the org, or all grants to remove", what)
	}
	var reqs []api.ShareDeleteRequest
	switch {
	case u.All:
		reqs = []api.ShareDeleteRequest{{}}
	default:
		for _, user := range u.Users {
			n := api.NormalizeShareUser(user)
			if n == "" {
				return api.ShareResponse{}, fmt.Errorf("%s: user %q: empty", what, user)
			}
			reqs = append(reqs, api.ShareDeleteRequest{User: n})
		}
		if u.Org {
			reqs = append(reqs, api.ShareDeleteRequest{Org: true})
		}
	}
	coord, err := c.coordinator(ctx, what)
	if err != nil {
		return api.ShareResponse{}, err
	}
	var out api.ShareResponse
	for _, req := range reqs {
		if out, err = coord.DeleteLeaseShare(ctx, ref, req); err != nil {
			return api.ShareResponse{}, fmt.Errorf("%s: %w", what, err)
		}
	}
	return out, nil
}

// Leases shared with this user.

// resolveShared resolves ref, which names no lease of the local store, as
// a lease of the coordinator shared with this client's user to use: a
// handle whose box is reached through the coordinator (Lease.SSH dials
// its relay, no key of the box needed), so that Sync, Run, Exec, Shell and
// forwards work on it unchanged, and whose Release leaves the lease as it
// was (it is its owner's). A lease shared to read is refused with an error
// naming the role; any other answer is notFound, the local store's error.
// Its keepalive heartbeats the lease at the coordinator (use allows it),
// which also checks that the lease is still shared and live.
func (c *Client) resolveShared(ctx context.Context, ref string, notFound error) (*Lease, error) {
	al, err := c.broker.coord.GetLease(ctx, ref)
	switch {
	case errors.Is(err, provider.ErrNotFound):
		return nil, notFound
	case err != nil:
		return nil, fmt.Errorf("resolve lease %s at the coordinator: %w", ref, err)
	case al.Access == "" || al.Access == api.AccessOwner:
		// Its own (or, for an admin, anyone's) lease, not held here:
		// this client has no key to its box.
		return nil, notFound
	case al.Access == string(api.ShareRead):
		return nil, fmt.Errorf("lease %s is shared with you to read: its box (ssh, runs, forwards) needs use: %w", al.ID, provider.ErrPrecondition)
	case al.State != api.LeaseActive:
		return nil, fmt.Errorf("lease %s shared with you is %s: %w", al.ID, al.State, provider.ErrNotFound)
	}
	g := sharedGrant(al, c.broker.coord.URL())
	touch := func(ctx context.Context, g lease.Grant) (lease.Grant, error) {
		// A user the lease is shared with to use may heartbeat it: work
		// on the box keeps it from idling out, as the owner's does.
		al, err := c.broker.coord.Heartbeat(ctx, g.Claim.ID, api.HeartbeatRequest{})
		if err != nil {
			return g, err
		}
		if al.State != api.LeaseActive {
			return g, fmt.Errorf("lease %s shared with you is %s: %w", al.ID, al.State, provider.ErrNotFound)
		}
		return sharedGrant(al, c.broker.coord.URL()), nil
	}
	c.log.Info("lease shared with you", "lease", al.ID, "owner", al.Owner, "access", al.Access)
	return c.track(&Lease{client: c, relayed: true, keep: c.store.KeepWith(touch, g, c.log)}), nil
}

// sharedGrant describes the coordinator's lease al, shared with this
// user, as a handle holds it: no key, and no claim in the store.
func sharedGrant(al api.Lease, coordinator string) lease.Grant {
	return lease.Grant{
		Claim: lease.Claim{
			ID: al.ID, Slug: al.Slug, Provider: al.Provider, State: lease.StateReady,
			CreatedAt: al.CreatedAt, LastTouchedAt: al.LastTouchedAt, ExpiresAt: al.ExpiresAt,
			TTLSeconds: int64(al.TTLSeconds), IdleSeconds: int64(al.IdleTimeoutSeconds),
			Keep: true, Labels: al.Labels, Route: lease.RouteBrokered, Coordinator: coordinator,
		},
		Target: provider.LeaseTarget{
			LeaseID: al.ID, Slug: al.Slug, Provider: al.Provider, CloudID: al.CloudID,
			WorkRoot: al.WorkRoot, State: string(al.State), Labels: al.Labels,
			CreatedAt: al.CreatedAt, ExpiresAt: al.ExpiresAt,
		},
	}
}

// dialRelay connects to the box of lease id, shared with this user,
// through the coordinator's SSH relay.
func (c *Client) dialRelay(ctx context.Context, id string) (*ssh.Client, error) {
	conn, err := c.broker.coord.DialLeaseSSH(ctx, id)
	if err != nil {
		return nil, fmt.Errorf("connect to lease %s through the coordinator: %w", id, err)
	}
	return conn, nil
}
