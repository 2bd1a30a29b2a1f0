package scaleway

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/scaleway/scaleway-sdk-go/api/instance/v1"
	"github.com/scaleway/scaleway-sdk-go/scw"

	"github.com/crabbox-dev/crabbox/lease"
	"github.com/crabbox-dev/crabbox/provider"
	"github.com/crabbox-dev/crabbox/providers/internal/cloud"
)

// Backend is the Scaleway provider's SSH-lease backend.
type Backend struct {
	cfg    Config
	rt     provider.Runtime
	client *scw.Client
	api    *instance.API
}

// New returns a backend for cfg. It makes no API call.
func New(cfg Config, rt provider.Runtime) (*Backend, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	rt = rt.WithDefaults()
	opts := []scw.ClientOption{
		scw.WithAuth(cfg.AccessKey, cfg.SecretKey), scw.WithDefaultProjectID(cfg.ProjectID),
		scw.WithDefaultZone(scw.Zone(cfg.Zones[0])), scw.WithHTTPClient(rt.HTTPClient), scw.WithUserAgent("crabbox"),
	}
	if cfg.Endpoint != "" {
		opts = append(opts, scw.WithAPIURL(cfg.Endpoint))
	}
	client, err := scw.NewClient(opts...)
	if err != nil {
		// The credentials were checked above, so this error holds none.
		return nil, fmt.Errorf("scaleway provider: %w", err)
	}
	return &Backend{cfg: cfg, rt: rt, client: client, api: instance.NewAPI(client)}, nil
}

// Spec describes the Scaleway provider.
func (b *Backend) Spec() provider.Spec { return Provider{}.Spec() }

// Acquire creates the lease's server: create (with user data and power
// on), address, SSH, ready tag. If a step fails, or ctx ends, it deletes
// the server and its volume before returning.
func (b *Backend) Acquire(ctx context.Context, req provider.AcquireRequest) (provider.LeaseTarget, error) {
	target, err := b.acquire(ctx, req, nil)
	if err != nil {
		// The caller (lease.Store.Acquire) names the provider and the lease.
		return provider.LeaseTarget{}, err
	}
	b.rt.Logger.Info("scaleway lease acquired", "lease", req.LeaseID, "server", target.CloudID,
		"commercial_type", target.Labels[cloud.LabelServerType], "host", target.Host, "port", target.Port)
	return target, nil
}

// source is an image of a checkpoint that a fork starts from, in its
// zone.
type source struct {
	zone  scw.Zone
	image string
}

// acquire makes the lease's server from the configured image or, when
// src is not nil (a fork), from src's image in its zone.
func (b *Backend) acquire(ctx context.Context, req provider.AcquireRequest, src *source) (target provider.LeaseTarget, err error) {
	clock, log := b.rt.Clock, b.rt.Logger.With("lease", req.LeaseID)
	image, prepared, candidates := b.cfg.Image, b.cfg.Prepared, b.cfg.candidates()
	if src != nil {
		// A checkpoint's image has the tools already.
		image, prepared = src.image, true
		candidates = slices.DeleteFunc(candidates, func(p placement) bool { return p.Zone != src.zone })
		if len(candidates) == 0 {
			return target, fmt.Errorf("image %s is in zone %s, not one of the configured zones %v: %w", src.image, src.zone, b.cfg.Zones, provider.ErrPrecondition)
		}
	}
	st, err := cloud.StartAcquire(req, clock.Now(), cloud.LabelOptions{Provider: Name, ServerType: b.cfg.CommercialTypes[0], Owner: b.cfg.Owner},
		cloud.Bootstrap{Ports: b.cfg.Ports, WorkRoot: b.cfg.WorkRoot, Prepared: prepared})
	if err != nil {
		return target, err
	}
	hostKey, labels, userData := st.HostKey, st.Labels, st.UserData
	deadline := clock.Now().Add(b.cfg.BootTimeout)
	name := serverName(req.LeaseID)

	rb := cloud.NewRollback(log, 0)
	defer rb.Finish(ctx, &err)

	// The deletion is pushed before the create call and finds what to
	// delete by the lease tag, so a create whose answer was lost is rolled
	// back too.
	rb.Add(cloud.StepCreate, "server "+name, func(ctx context.Context) error {
		return b.deleteServers(ctx, req.LeaseID, cloud.StateFailed)
	})
	var srv *instance.Server
	_, err = cloud.FirstWithCapacity(ctx, log, candidates, func(ctx context.Context, p placement) error {
		l := maps.Clone(labels)
		l[cloud.LabelServerType] = p.Type
		tags, err := tagCodec.Tags(l)
		if err != nil {
			return err
		}
		res, err := b.api.CreateServer(&instance.CreateServerRequest{
			Zone: p.Zone, Name: name, CommercialType: p.Type, Image: scw.StringPtr(image), Project: scw.StringPtr(b.cfg.ProjectID),
			Tags: tags, DynamicIPRequired: scw.BoolPtr(true),
			Volumes: map[string]*instance.VolumeServerTemplate{"0": {
				Boot: scw.BoolPtr(true), VolumeType: instance.VolumeVolumeTypeLSSD, Size: scw.SizePtr(scw.Size(b.cfg.DiskGB) * scw.GB),
			}},
		}, scw.WithContext(ctx))
		if err != nil {
			return apiError(ctx, "create server ("+p.String()+")", err)
		}
		if res.Server == nil {
			return errors.New("create server (" + p.String() + "): the API returned no server")
		}
		srv = res.Server
		log.Info("scaleway server created", "server", srv.ID, "placement", p.String())
		return nil
	})
	if err != nil {
		return target, cloud.Failed(cloud.StepCreate, err)
	}
	if err := b.boot(ctx, srv, userData); err != nil {
		return target, cloud.Failed(cloud.StepCreate, err)
	}

	srv, ip, err := b.waitAddress(ctx, srv.Zone, srv.ID, deadline)
	if err != nil {
		return target, cloud.Failed(cloud.StepAddress, err)
	}

	port, err := cloud.WaitForSSH(ctx, cloud.SSHWait{
		Host: ip, Ports: b.cfg.Ports, HostKey: hostKey.PublicKey(), Clock: clock,
		Interval: b.cfg.PollInterval, Timeout: max(deadline.Sub(clock.Now()), time.Nanosecond), Dial: cloud.MappedDial(b.cfg.MapAddress), Log: log,
	})
	if err != nil {
		return target, cloud.Failed(cloud.StepSSH, err)
	}

	ready := cloud.WithSSHPort(cloud.WithState(tagCodec.Labels(srv.Tags), cloud.StateReady), port)
	updated, err := b.retag(ctx, srv, ready)
	if err != nil {
		return target, cloud.Failed(cloud.StepLabel, fmt.Errorf("tag the server ready: %w", err))
	}
	return b.target(updated)
}

// boot gives the new server its cloud-init user data and powers it on.
func (b *Backend) boot(ctx context.Context, srv *instance.Server, userData string) error {
	err := b.api.SetServerUserData(&instance.SetServerUserDataRequest{
		Zone: srv.Zone, ServerID: srv.ID, Key: "cloud-init", Content: strings.NewReader(userData),
	}, scw.WithContext(ctx))
	if err != nil {
		return apiError(ctx, "set the user data of server "+srv.ID, err)
	}
	_, err = b.api.ServerAction(&instance.ServerActionRequest{Zone: srv.Zone, ServerID: srv.ID, Action: instance.ServerActionPoweron}, scw.WithContext(ctx))
	if err != nil {
		return apiError(ctx, "power on server "+srv.ID, err)
	}
	return nil
}

// waitAddress polls the server until it runs and has a public IPv4
// address, or the deadline passes.
func (b *Backend) waitAddress(ctx context.Context, zone scw.Zone, id string, deadline time.Time) (*instance.Server, string, error) {
	clock := b.rt.Clock
	pace := cloud.NewBackoff(b.cfg.PollInterval)
	for {
		srv, err := b.get(ctx, zone, id)
		if err != nil {
			return nil, "", err
		}
		ip := publicIP(srv)
		if srv.State == instance.ServerStateRunning && ip != "" {
			return srv, ip, nil
		}
		left := deadline.Sub(clock.Now())
		if left <= 0 {
			return nil, "", fmt.Errorf("server %s is %s with address %q after %s: %w", id, srv.State, ip, b.cfg.BootTimeout, provider.ErrTransient)
		}
		select {
		case <-ctx.Done():
			return nil, "", fmt.Errorf("wait for the address of server %s: %w", id, ctx.Err())
		case <-clock.After(min(pace.Next(), left)):
		}
	}
}

// publicIP is the server's public IPv4 address, or "".
func publicIP(s *instance.Server) string {
	for _, ip := range s.PublicIPs {
		if ip != nil && ip.Family == instance.ServerIPIPFamilyInet && ip.Address != nil && !ip.Address.IsUnspecified() {
			return ip.Address.String()
		}
	}
	return ""
}

func (b *Backend) get(ctx context.Context, zone scw.Zone, id string) (*instance.Server, error) {
	res, err := b.api.GetServer(&instance.GetServerRequest{Zone: zone, ServerID: id}, scw.WithContext(ctx))
	if err != nil {
		return nil, apiError(ctx, "read server "+id, err)
	}
	if res.Server == nil {
		return nil, fmt.Errorf("read server %s: no server in the answer: %w", id, provider.ErrNotFound)
	}
	return res.Server, nil
}

// retag replaces the server's tags with labels.
func (b *Backend) retag(ctx context.Context, srv *instance.Server, labels map[string]string) (*instance.Server, error) {
	tags, err := tagCodec.Tags(labels)
	if err != nil {
		return nil, fmt.Errorf("tag server %s: %w", srv.ID, err)
	}
	res, err := b.api.UpdateServer(&instance.UpdateServerRequest{Zone: srv.Zone, ServerID: srv.ID, Tags: &tags}, scw.WithContext(ctx))
	if err != nil {
		return nil, apiError(ctx, "tag server "+srv.ID, err)
	}
	if res.Server == nil {
		return nil, fmt.Errorf("tag server %s: no server in the answer: %w", srv.ID, provider.ErrNotFound)
	}
	return res.Server, nil
}

// cloudID is the server's zone and ID, which find it again.
func cloudID(s *instance.Server) string { return string(s.Zone) + "/" + s.ID }

// target describes the box of server s from its tags.
func (b *Backend) target(s *instance.Server) (provider.LeaseTarget, error) {
	info, err := cloud.ParseLabels(tagCodec.Labels(s.Tags))
	if err != nil {
		return provider.LeaseTarget{}, fmt.Errorf("server %s: %w", s.ID, err)
	}
	t := provider.LeaseTarget{CloudID: cloudID(s), User: cloud.DefaultUser, WorkRoot: b.cfg.WorkRoot}
	info.Apply(&t)
	if t.Port == 0 {
		t.Port = b.cfg.Ports[0]
	}
	if ip := publicIP(s); ip != "" {
		t.Host, t.Port = b.cfg.MapAddress(ip, t.Port)
	}
	if s.State != instance.ServerStateRunning {
		t.State = string(s.State)
	}
	return t, nil
}

// servers lists crabbox's servers of this provider in every configured
// zone, of one lease when leaseID is set, matching extra labels.
func (b *Backend) servers(ctx context.Context, leaseID string, extra map[string]string) ([]*instance.Server, error) {
	want := cloud.Ownership(Name, leaseID)
	maps.Copy(want, extra)
	var filter []string
	for _, k := range slices.Sorted(maps.Keys(want)) {
		filter = append(filter, tagCodec.Tag(k, want[k]))
	}
	var out []*instance.Server
	for _, zone := range b.cfg.Zones {
		res, err := b.api.ListServers(&instance.ListServersRequest{
			Zone: scw.Zone(zone), Project: scw.StringPtr(b.cfg.ProjectID), Tags: filter,
		}, scw.WithContext(ctx), scw.WithAllPages())
		if err != nil {
			return nil, apiError(ctx, "list servers in "+zone, err)
		}
		for _, s := range res.Servers {
			if matches(tagCodec.Labels(s.Tags), want) {
				out = append(out, s)
			}
		}
	}
	return out, nil
}

func matches(labels, want map[string]string) bool {
	for k, v := range want {
		if got, ok := labels[k]; !ok || got != v {
			return false
		}
	}
	return true
}

// Resolve finds the running server of a lease by lease ID or slug.
func (b *Backend) Resolve(ctx context.Context, req provider.ResolveRequest) (provider.LeaseTarget, error) {
	t, err := b.resolve(ctx, req.ID)
	if err != nil {
		return provider.LeaseTarget{}, fmt.Errorf("resolve scaleway lease %s: %w", req.ID, err)
	}
	return t, nil
}

func (b *Backend) resolve(ctx context.Context, ref string) (provider.LeaseTarget, error) {
	srv, err := cloud.ResolveLive(ctx, ref, func(ctx context.Context, leaseID, slug string) ([]*instance.Server, error) {
		if slug != "" {
			return b.servers(ctx, "", map[string]string{cloud.LabelSlug: slug})
		}
		return b.servers(ctx, leaseID, nil)
	}, live, "server", func(s *instance.Server) any { return s.ID })
	if err != nil {
		return provider.LeaseTarget{}, err
	}
	return b.target(srv)
}

// live reports whether s is a running box of a lease that is ready.
func live(s *instance.Server) bool {
	st := tagCodec.Labels(s.Tags)[cloud.LabelState]
	return s.State == instance.ServerStateRunning && (st == cloud.StateReady || st == cloud.StateRunning)
}

// List returns every crabbox server of the provider, whatever its state.
// Servers whose tags do not parse are logged and left out.
func (b *Backend) List(ctx context.Context, _ provider.ListRequest) ([]provider.LeaseTarget, error) {
	all, err := b.servers(ctx, "", nil)
	if err != nil {
		return nil, fmt.Errorf("list scaleway leases: %w", err)
	}
	return cloud.Targets(b.rt.Logger, all, b.target, "scaleway server with unreadable tags", "server",
		func(s *instance.Server) any { return s.ID }), nil
}

// Touch records activity on the lease's server: its last_touched_at and
// expires_at tags.
func (b *Backend) Touch(ctx context.Context, req provider.TouchRequest) (provider.LeaseTarget, error) {
	t, err := b.touch(ctx, req)
	if err != nil {
		return provider.LeaseTarget{}, fmt.Errorf("touch scaleway lease %s: %w", req.Lease.LeaseID, err)
	}
	return t, nil
}

func (b *Backend) touch(ctx context.Context, req provider.TouchRequest) (provider.LeaseTarget, error) {
	if err := cloud.CheckTouch(req); err != nil {
		return provider.LeaseTarget{}, err
	}
	srv, err := b.leaseServer(ctx, req.Lease)
	if err != nil {
		return provider.LeaseTarget{}, err
	}
	updated, err := b.retag(ctx, srv, cloud.Touch(tagCodec.Labels(srv.Tags), req.Now, req.ExpiresAt))
	if err != nil {
		return provider.LeaseTarget{}, err
	}
	return b.target(updated)
}

// leaseServer finds the live server of lease l: by its cloud ID (zone/ID)
// when the target has one (checking the lease tag), else by the lease tag.
func (b *Backend) leaseServer(ctx context.Context, l provider.LeaseTarget) (*instance.Server, error) {
	if !lease.IsID(l.LeaseID) {
		return nil, fmt.Errorf("lease ID %q is not a crabbox lease ID", l.LeaseID)
	}
	ref := l.CloudID
	if ref == "" {
		t, err := b.resolve(ctx, l.LeaseID)
		if err != nil {
			return nil, err
		}
		ref = t.CloudID
	}
	zone, id, ok := strings.Cut(ref, "/")
	if !ok {
		return nil, fmt.Errorf("cloud ID %q is not zone/ID: %w", ref, provider.ErrNotFound)
	}
	srv, err := b.get(ctx, scw.Zone(zone), id)
	if err != nil {
		return nil, err
	}
	labels := tagCodec.Labels(srv.Tags)
	if labels[cloud.LabelLease] != l.LeaseID || labels[cloud.LabelProvider] != Name || !live(srv) {
		return nil, fmt.Errorf("server %s is not this lease's running server: %w", id, provider.ErrNotFound)
	}
	return srv, nil
}

// ReleaseLease deletes the lease's servers and their local volumes, found
// by the lease tag. It needs only the lease ID, and succeeds when they are
// already gone.
func (b *Backend) ReleaseLease(ctx context.Context, req provider.ReleaseRequest) error {
	id := req.Lease.LeaseID
	if !lease.IsID(id) {
		return fmt.Errorf("release scaleway lease: lease ID %q is not a crabbox lease ID", id)
	}
	if err := b.deleteServers(ctx, id, cloud.StateReleased); err != nil {
		return fmt.Errorf("release scaleway lease %s: %w", id, err)
	}
	b.rt.Logger.Info("scaleway lease released", "lease", id)
	return nil
}

// deleteServers deletes every server tagged with the lease. A server it
// fails to delete it tries to tag with state orphan (failed or released),
// so that cleanup deletes it as soon as it sees it instead of waiting for
// a grace period.
func (b *Backend) deleteServers(ctx context.Context, leaseID, orphan string) error {
	found, err := b.servers(ctx, leaseID, nil)
	if err != nil {
		return err
	}
	var errs []error
	for _, s := range found {
		if err := b.deleteServer(ctx, s); err != nil {
			errs = append(errs, err)
			if _, lerr := b.retag(ctx, s, cloud.WithState(tagCodec.Labels(s.Tags), orphan)); lerr != nil {
				b.rt.Logger.Warn("scaleway server left behind, untagged", "server", s.ID, "lease", leaseID, "err", lerr)
			} else {
				b.rt.Logger.Warn("scaleway server left behind for cleanup", "server", s.ID, "lease", leaseID, "state", orphan)
			}
		}
	}
	return errors.Join(errs...)
}

// deleteServer deletes one server with its local volumes and waits until
// it is gone. A server that is not running any more (never started, or
// powered off) is deleted and its volumes after it; any other is
// terminated, which takes its local volumes with it. One already gone
// counts as deleted.
func (b *Backend) deleteServer(ctx context.Context, s *instance.Server) error {
	if s.State == instance.ServerStateStopped {
		err := b.api.DeleteServer(&instance.DeleteServerRequest{Zone: s.Zone, ServerID: s.ID}, scw.WithContext(ctx))
		if err = apiError(ctx, "delete server "+s.ID, err); err != nil && !errors.Is(err, provider.ErrNotFound) {
			return err
		}
		for _, v := range s.Volumes {
			err := b.api.DeleteVolume(&instance.DeleteVolumeRequest{Zone: s.Zone, VolumeID: v.ID}, scw.WithContext(ctx))
			if err = apiError(ctx, "delete volume "+v.ID+" of server "+s.ID, err); err != nil && !errors.Is(err, provider.ErrNotFound) {
				return err
			}
		}
	} else {
		_, err := b.api.ServerAction(&instance.ServerActionRequest{Zone: s.Zone, ServerID: s.ID, Action: instance.ServerActionTerminate}, scw.WithContext(ctx))
		if err = apiError(ctx, "terminate server "+s.ID, err); err != nil && !errors.Is(err, provider.ErrNotFound) {
			return err
		}
		if err := b.waitGone(ctx, s); err != nil {
			return err
		}
	}
	b.rt.Logger.Info("scaleway server deleted", "server", s.ID, "lease", tagCodec.Labels(s.Tags)[cloud.LabelLease])
	return nil
}

// waitGone polls a terminated server until the API no longer knows it.
func (b *Backend) waitGone(ctx context.Context, s *instance.Server) error {
	pace := cloud.NewBackoff(b.cfg.PollInterval)
	for {
		_, err := b.get(ctx, s.Zone, s.ID)
		if errors.Is(err, provider.ErrNotFound) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("wait for server %s to go: %w", s.ID, err)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("wait for server %s to go: %w", s.ID, ctx.Err())
		case <-b.rt.Clock.After(pace.Next()):
		}
	}
}

// apiError names the operation and classifies a Scaleway SDK error as one
// of the provider's portable errors, keeping the SDK error reachable. nil
// stays nil.
func apiError(ctx context.Context, op string, err error) error {
	if err == nil {
		return nil
	}
	if ctx.Err() != nil {
		return fmt.Errorf("%s: %w (%v)", op, ctx.Err(), err)
	}
	var (
		outOfStock *scw.OutOfStockError
		quota      *scw.QuotasExceededError
		denied     *scw.DeniedAuthenticationError
		perm       *scw.PermissionsDeniedError
		notFound   *scw.ResourceNotFoundError
		transient  *scw.TransientStateError
		locked     *scw.ResourceLockedError
		invalid    *scw.InvalidArgumentsError
		pre        *scw.PreconditionFailedError
		res        *scw.ResponseError
	)
	var kind error
	switch {
	case errors.As(err, &outOfStock), errors.As(err, &quota):
		kind = provider.ErrCapacity
	case errors.As(err, &denied), errors.As(err, &perm):
		kind = provider.ErrUnauthenticated
	case errors.As(err, &notFound):
		kind = provider.ErrNotFound
	case errors.As(err, &transient), errors.As(err, &locked):
		kind = provider.ErrConflict
	case errors.As(err, &invalid), errors.As(err, &pre):
		kind = provider.ErrPrecondition
	case errors.As(err, &res):
		switch {
		case res.StatusCode == http.StatusUnauthorized || res.StatusCode == http.StatusForbidden:
			kind = provider.ErrUnauthenticated
		case res.StatusCode == http.StatusNotFound:
			kind = provider.ErrNotFound
		case res.StatusCode == http.StatusConflict:
			kind = provider.ErrConflict
		case res.StatusCode >= 400 && res.StatusCode < 500 && res.StatusCode != http.StatusTooManyRequests:
			kind = provider.ErrPrecondition
		default:
			kind = provider.ErrTransient
		}
	default:
		kind = provider.ErrTransient
	}
	return fmt.Errorf("%s: %w: %w", op, kind, err)
}
