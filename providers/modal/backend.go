package modal

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	modalsdk "github.com/modal-labs/modal-client/go"
	pb "github.com/modal-labs/modal-client/go/proto/modal_proto"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/crabbox-dev/crabbox/lease"
	"github.com/crabbox-dev/crabbox/provider"
	"github.com/crabbox-dev/crabbox/providers/internal/cloud"
)

// cleanupTimeout bounds the removal of a half-made sandbox after the
// caller has given up.
const cleanupTimeout = time.Minute

// Tags crabbox sets on its sandboxes besides the lease's own labels.
const (
	tagTTLEnd    = "ttl_end" // Unix seconds: when the lease's TTL ends
	labelPrefix  = "label."  // a lease label, by key
	maxTagLength = 256
)

// Backend is the provider's delegated backend. Close releases the SDK's
// connections.
type Backend struct {
	cfg Config
	rt  provider.Runtime

	mu     sync.Mutex
	client *modalsdk.Client // made on first use
	closed bool
	app    *modalsdk.App
}

// New returns a backend for cfg. It makes no API call and opens no
// connection: the SDK's client is made on first use.
func New(cfg Config, rt provider.Runtime) (*Backend, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	if cfg.Endpoint != "" && cfg.TokenID == "" {
		return nil, fmt.Errorf("%s provider: config \"endpoint\" needs %s and %s in the environment: %w",
			Name, "MODAL_TOKEN_ID", "MODAL_TOKEN_SECRET", provider.ErrUnauthenticated)
	}
	return &Backend{cfg: cfg, rt: rt.WithDefaults()}, nil
}

// sdk returns the SDK's client, making it on first use.
func (b *Backend) sdk() (*modalsdk.Client, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return nil, fmt.Errorf("%s: backend closed", Name)
	}
	if b.client != nil {
		return b.client, nil
	}
	c, err := newClient(b.cfg, b.rt)
	if err != nil {
		return nil, err
	}
	b.client = c
	return c, nil
}

// newClient makes the SDK's client for cfg: on cfg.Endpoint when set,
// else on the SDK's own server URL (MODAL_SERVER_URL, ~/.modal.toml).
func newClient(cfg Config, rt provider.Runtime) (*modalsdk.Client, error) {
	params := &modalsdk.ClientParams{TokenID: cfg.TokenID, TokenSecret: cfg.TokenSecret, Environment: cfg.Environment, Logger: rt.Logger}
	if cfg.Endpoint != "" {
		conn, err := dial(cfg)
		if err != nil {
			return nil, err
		}
		params.ControlPlaneClient, params.ControlPlaneConn = pb.NewModalClientClient(conn), conn
	}
	client, err := modalsdk.NewClientWithOptions(params)
	if err != nil {
		if params.ControlPlaneConn != nil {
			_ = params.ControlPlaneConn.Close()
		}
		return nil, fmt.Errorf("%s provider: %s: %w", Name, scrub(err.Error(), cfg), provider.ErrUnauthenticated)
	}
	return client, nil
}

// dial opens the control-plane connection to cfg.Endpoint with the
// headers Modal's server wants of every request (as the SDK's own
// connection sends them).
func dial(cfg Config) (*grpc.ClientConn, error) {
	u, _ := url.Parse(cfg.Endpoint)
	port := u.Port()
	var creds credentials.TransportCredentials
	if u.Scheme == "https" {
		creds = credentials.NewTLS(nil)
		if port == "" {
			port = "443"
		}
	} else {
		creds = insecure.NewCredentials()
		if port == "" {
			port = "80"
		}
	}
	headers := []string{
		"x-modal-client-type", strconv.Itoa(int(pb.ClientType_CLIENT_TYPE_LIBMODAL_GO)),
		"x-modal-client-version", "1.0.0",
		"x-modal-host", u.Hostname(),
		"x-modal-token-id", cfg.TokenID,
		"x-modal-token-secret", cfg.TokenSecret,
	}
	unary := func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, inv grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		return inv(metadata.AppendToOutgoingContext(ctx, headers...), method, req, reply, cc, opts...)
	}
	stream := func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, s grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
		return s(metadata.AppendToOutgoingContext(ctx, headers...), desc, cc, method, opts...)
	}
	conn, err := grpc.NewClient(u.Hostname()+":"+port, grpc.WithTransportCredentials(creds),
		grpc.WithDefaultServiceConfig(retryPolicy),
		grpc.WithChainUnaryInterceptor(unary), grpc.WithChainStreamInterceptor(stream))
	if err != nil {
		return nil, fmt.Errorf("%s provider: config \"endpoint\" %q: %w", Name, cfg.Endpoint, err)
	}
	return conn, nil
}

// retryPolicy retries a control-plane call answered UNAVAILABLE or
// RESOURCE_EXHAUSTED (Modal's rate limit) a bounded number of times with
// exponential backoff, as the SDK's own connection does with its
// interceptor.
const retryPolicy = `{"methodConfig": [{"name": [{"service": "modal.client.ModalClient"}],
  "retryPolicy": {"maxAttempts": 4, "initialBackoff": "0.1s", "maxBackoff": "2s", "backoffMultiplier": 2,
    "retryableStatusCodes": ["UNAVAILABLE", "RESOURCE_EXHAUSTED"]}}]}`

// scrub removes the token from s, should an error ever carry it.
func scrub(s string, cfg Config) string {
	for _, secret := range []string{cfg.TokenSecret, cfg.TokenID} {
		if secret != "" {
			s = strings.ReplaceAll(s, secret, "[redacted]")
		}
	}
	return s
}

// wrap gives err this provider's prefix and, for gRPC statuses, the
// matching provider error; the token never appears.
func (b *Backend) wrap(what string, err error) error {
	if err == nil {
		return nil
	}
	var kind error
	var nf modalsdk.NotFoundError
	switch code := status.Code(err); {
	case errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded):
		return fmt.Errorf("%s: %s: %w", Name, what, err)
	case errors.As(err, &nf) || code == codes.NotFound:
		kind = provider.ErrNotFound
	case code == codes.Unauthenticated || code == codes.PermissionDenied:
		kind = provider.ErrUnauthenticated
	}
	msg := scrub(err.Error(), b.cfg)
	if kind != nil {
		return fmt.Errorf("%s: %s: %s: %w", Name, what, msg, kind)
	}
	return fmt.Errorf("%s: %s: %s", Name, what, msg)
}

// Close releases the SDK's connections.
func (b *Backend) Close() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.closed = true
	if b.client != nil {
		b.client.Close()
		b.client = nil
	}
	return nil
}

// Spec describes the provider.
func (b *Backend) Spec() provider.Spec { return Provider{}.Spec() }

// MaxLifetime is the longest a sandbox lives, from its creation.
func (b *Backend) MaxLifetime() time.Duration { return b.cfg.MaxLifetime }

// ownerTags are the tags every sandbox of this owner carries; List asks
// Modal for exactly these.
func (b *Backend) ownerTags() map[string]string {
	return map[string]string{cloud.LabelCrabbox: "true", cloud.LabelProvider: Name, cloud.LabelOwner: b.cfg.Owner}
}

func (b *Backend) getApp(ctx context.Context) (*modalsdk.App, error) {
	client, err := b.sdk()
	if err != nil {
		return nil, err
	}
	b.mu.Lock()
	app := b.app
	b.mu.Unlock()
	if app != nil {
		return app, nil
	}
	app, err = client.Apps.FromName(ctx, b.cfg.App, &modalsdk.AppFromNameParams{Environment: b.cfg.Environment, CreateIfMissing: true})
	if err != nil {
		return nil, b.wrap(fmt.Sprintf("app %q", b.cfg.App), err)
	}
	b.mu.Lock()
	b.app = app
	b.mu.Unlock()
	return app, nil
}

// Timeouts returns the sandbox timeout and idle timeout for a lease: the
// TTL, refused when Modal cannot keep a sandbox that long (never silently
// shortened below what the library capped it to).
func (b *Backend) Timeouts(ttl, idle time.Duration) (time.Duration, time.Duration, error) {
	if ttl <= 0 {
		ttl = lease.DefaultTTL
	}
	ttl = ttl.Round(time.Second)
	if ttl > b.cfg.MaxLifetime {
		return 0, 0, fmt.Errorf("%s: the lease's TTL of %s is longer than the longest a Modal sandbox lives here (%s; config \"max-lifetime\", Modal's maximum %s): ask for a TTL of %s or less: %w",
			Name, ttl, b.cfg.MaxLifetime, MaxTimeout, b.cfg.MaxLifetime, provider.ErrPrecondition)
	}
	if idle < 0 || idle >= ttl {
		idle = 0 // no idle timeout shorter than the sandbox's own
	}
	return ttl, idle.Round(time.Second), nil
}

// Warmup creates the lease's sandbox, tagged for this owner. If the
// sandbox was made but a later step fails, it is terminated.
func (b *Backend) Warmup(ctx context.Context, req provider.WarmupRequest) (provider.LeaseView, error) {
	if !lease.IsID(req.LeaseID) {
		return provider.LeaseView{}, fmt.Errorf("%s: lease ID %q is not a crabbox lease ID", Name, req.LeaseID)
	}
	ttl, idle, err := b.Timeouts(req.TTL, req.IdleTimeout)
	if err != nil {
		return provider.LeaseView{}, err
	}
	now := b.rt.Clock.Now().UTC().Truncate(time.Second)
	tags := b.ownerTags()
	tags[cloud.LabelCreatedBy] = "crabbox"
	tags[cloud.LabelLease] = req.LeaseID
	tags[cloud.LabelCreatedAt] = strconv.FormatInt(now.Unix(), 10)
	tags[tagTTLEnd] = strconv.FormatInt(now.Add(ttl).Unix(), 10)
	if req.Slug != "" {
		tags[cloud.LabelSlug] = req.Slug
	}
	for k, v := range req.Labels {
		if len(k)+len(labelPrefix) > maxTagLength || len(v) > maxTagLength {
			return provider.LeaseView{}, fmt.Errorf("%s: label %q: key or value longer than %d bytes", Name, k, maxTagLength-len(labelPrefix))
		}
		tags[labelPrefix+k] = v
	}
	app, err := b.getApp(ctx)
	if err != nil {
		return provider.LeaseView{}, fmt.Errorf("%s: warm up %s: %w", Name, req.LeaseID, err)
	}
	client, err := b.sdk()
	if err != nil {
		return provider.LeaseView{}, err
	}
	image := client.Images.FromRegistry(b.cfg.Image, nil)
	sb, err := client.Sandboxes.Create(ctx, app, image, &modalsdk.SandboxCreateParams{
		Timeout: ttl, IdleTimeout: idle, Workdir: "/", Tags: tags,
		Command: []string{"sleep", "infinity"},
	})
	if err != nil {
		return provider.LeaseView{}, fmt.Errorf("%s: warm up %s: %w", Name, req.LeaseID, b.wrap("create sandbox", err))
	}
	if err := b.mkdir(ctx, sb, b.cfg.Workdir); err != nil {
		defer func() { _ = sb.Detach() }()
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
		defer cancel()
		if _, terr := sb.Terminate(rctx, nil); terr != nil {
			err = errors.Join(err, fmt.Errorf("terminate the half-made sandbox %s (cleanup will retry): %w", sb.SandboxID, b.wrap("terminate", terr)))
		}
		return provider.LeaseView{}, fmt.Errorf("%s: warm up %s: %w", Name, req.LeaseID, err)
	}
	_ = sb.Detach()
	b.rt.Logger.Info("modal sandbox created", "lease", req.LeaseID, "sandbox", sb.SandboxID)
	v := b.view(sb.SandboxID, tags)
	if !req.ExpiresAt.IsZero() && req.ExpiresAt.Before(v.ExpiresAt) {
		v.ExpiresAt = req.ExpiresAt
	}
	return v, nil
}

// view is the lease a sandbox's tags describe.
func (b *Backend) view(id string, tags map[string]string) provider.LeaseView {
	labels := map[string]string{}
	for k, v := range tags {
		if key, ok := strings.CutPrefix(k, labelPrefix); ok {
			labels[key] = v
		}
	}
	return provider.LeaseView{
		ID: tags[cloud.LabelLease], Slug: tags[cloud.LabelSlug], Provider: Name, CloudID: id, State: "ready",
		Labels: labels, CreatedAt: unixTag(tags, cloud.LabelCreatedAt), ExpiresAt: unixTag(tags, tagTTLEnd),
		WorkRoot: b.cfg.Workdir,
	}
}

func unixTag(tags map[string]string, k string) time.Time {
	n, err := strconv.ParseInt(tags[k], 10, 64)
	if err != nil {
		return time.Time{}
	}
	return time.Unix(n, 0).UTC()
}

// found is one of this owner's live sandboxes.
type found struct {
	sb   *modalsdk.Sandbox
	tags map[string]string
}

// mine lists this owner's live sandboxes (those of extra tags too),
// reading each one's tags.
func (b *Backend) mine(ctx context.Context, extra map[string]string) ([]found, error) {
	tags := b.ownerTags()
	maps.Copy(tags, extra)
	app, err := b.getApp(ctx)
	if err != nil {
		return nil, err
	}
	client, err := b.sdk()
	if err != nil {
		return nil, err
	}
	seq, err := client.Sandboxes.List(ctx, &modalsdk.SandboxListParams{AppID: app.AppID, Tags: tags})
	if err != nil {
		return nil, b.wrap("list sandboxes", err)
	}
	var out []found
	for sb, err := range seq {
		if err != nil {
			return nil, b.wrap("list sandboxes", err)
		}
		got, err := sb.GetTags(ctx, nil)
		if err != nil {
			return nil, b.wrap("tags of sandbox "+sb.SandboxID, err)
		}
		// Modal filtered by tags; check them anyway, and the lease ID.
		ok := lease.IsID(got[cloud.LabelLease])
		for k, v := range tags {
			ok = ok && got[k] == v
		}
		if ok {
			out = append(out, found{sb, got})
		}
	}
	return out, nil
}

// detach releases the SDK's connections to the sandboxes of all.
func detach(all []found) {
	for _, f := range all {
		_ = f.sb.Detach()
	}
}

// List returns this owner's live crabbox sandboxes.
func (b *Backend) List(ctx context.Context, _ provider.ListRequest) ([]provider.LeaseView, error) {
	all, err := b.mine(ctx, nil)
	if err != nil {
		return nil, err
	}
	defer detach(all)
	out := make([]provider.LeaseView, 0, len(all))
	for _, f := range all {
		out = append(out, b.view(f.sb.SandboxID, f.tags))
	}
	return out, nil
}

// find returns the live sandbox of a lease by ID or slug; the caller
// detaches it.
func (b *Backend) find(ctx context.Context, id string) (found, error) {
	key := cloud.LabelLease
	if !lease.IsID(id) {
		key = cloud.LabelSlug
	}
	all, err := b.mine(ctx, map[string]string{key: id})
	if err != nil {
		return found{}, err
	}
	if len(all) != 1 {
		defer detach(all)
	}
	switch len(all) {
	case 0:
		return found{}, fmt.Errorf("%s: no live sandbox for lease %q: %w", Name, id, provider.ErrNotFound)
	case 1:
		return all[0], nil
	}
	var ids []string
	for _, f := range all {
		ids = append(ids, f.tags[cloud.LabelLease])
	}
	return found{}, fmt.Errorf("%s: %q names several leases (%s): %w", Name, id, strings.Join(ids, ", "), provider.ErrConflict)
}

// Status returns a live lease by ID or slug.
func (b *Backend) Status(ctx context.Context, req provider.StatusRequest) (provider.LeaseView, error) {
	f, err := b.find(ctx, req.ID)
	if err != nil {
		return provider.LeaseView{}, err
	}
	_ = f.sb.Detach()
	return b.view(f.sb.SandboxID, f.tags), nil
}

// Stop terminates the lease's sandbox; a lease already gone is stopped.
func (b *Backend) Stop(ctx context.Context, req provider.StopRequest) error {
	f, err := b.find(ctx, req.ID)
	if errors.Is(err, provider.ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	defer func() { _ = f.sb.Detach() }()
	if _, err := f.sb.Terminate(ctx, nil); err != nil {
		return fmt.Errorf("%s: stop %s: %w", Name, req.ID, b.wrap("terminate", err))
	}
	b.rt.Logger.Info("modal sandbox terminated", "lease", f.tags[cloud.LabelLease], "sandbox", f.sb.SandboxID)
	return nil
}

// Cleanup terminates this owner's sandboxes whose lease TTL has passed and
// whose lease the caller holds a claim for.
func (b *Backend) Cleanup(ctx context.Context, req provider.CleanupRequest) ([]provider.CleanupDecision, error) {
	all, err := b.mine(ctx, nil)
	if err != nil {
		return nil, err
	}
	defer detach(all)
	now := req.Now
	if now.IsZero() {
		now = b.rt.Clock.Now()
	}
	var out []provider.CleanupDecision
	for _, f := range all {
		id := f.tags[cloud.LabelLease]
		d := provider.CleanupDecision{LeaseID: id, Slug: f.tags[cloud.LabelSlug], CloudID: f.sb.SandboxID}
		end := unixTag(f.tags, tagTTLEnd)
		switch {
		case req.Claimed == nil || !req.Claimed(id):
			d.Reason = "no claim for this lease here: not ours to delete"
		case end.IsZero():
			d.Reason = "no readable TTL end tag: kept"
		case now.Before(end):
			d.Reason = "TTL ends " + end.Format(time.RFC3339)
		default:
			d.Delete, d.Reason = true, "TTL ended "+end.Format(time.RFC3339)
		}
		if d.Delete && !req.DryRun {
			if _, err := f.sb.Terminate(ctx, nil); err != nil {
				d.Err = b.wrap("terminate", err)
			} else {
				d.Deleted = true
			}
		}
		out = append(out, d)
	}
	return out, nil
}

// Doctor checks that the credentials work and the app can be reached,
// without creating a sandbox.
func (b *Backend) Doctor(ctx context.Context) ([]provider.Check, error) {
	all, err := b.mine(ctx, nil)
	detach(all)
	c := provider.Check{Name: "modal api", OK: err == nil, Detail: "sandboxes of owner " + b.cfg.Owner + " listed"}
	if err != nil {
		c.Detail = err.Error()
	}
	return []provider.Check{c}, nil
}
