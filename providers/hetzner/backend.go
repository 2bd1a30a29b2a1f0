package hetzner

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/hetznercloud/hcloud-go/v2/hcloud"

	"github.com/crabbox-dev/crabbox/lease"
	"github.com/crabbox-dev/crabbox/provider"
	"github.com/crabbox-dev/crabbox/providers/internal/cloud"
)

// Backend is the Hetzner provider's SSH-lease backend.
type Backend struct {
	cfg    Config
	rt     provider.Runtime
	client *hcloud.Client
}

// New returns a backend for cfg. It makes no API call.
func New(cfg Config, rt provider.Runtime) (*Backend, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	rt = rt.WithDefaults()
	opts := []hcloud.ClientOption{
		hcloud.WithToken(cfg.Token),
		hcloud.WithHTTPClient(rt.HTTPClient),
		hcloud.WithApplication("crabbox", ""),
	}
	if cfg.Endpoint != "" {
		opts = append(opts, hcloud.WithEndpoint(cfg.Endpoint))
	}
	opts = append(opts, cfg.ClientOptions...)
	return &Backend{cfg: cfg, rt: rt, client: hcloud.NewClient(opts...)}, nil
}

// Spec describes the Hetzner provider.
func (b *Backend) Spec() provider.Spec { return Provider{}.Spec() }

// Acquire creates the lease's server: key, server, address, SSH, ready
// label. If a step fails, or ctx ends, it deletes what it made (the server,
// then the key) before returning.
func (b *Backend) Acquire(ctx context.Context, req provider.AcquireRequest) (provider.LeaseTarget, error) {
	target, err := b.acquire(ctx, req, nil)
	if err != nil {
		// The caller (lease.Store.Acquire) names the provider and the lease.
		return provider.LeaseTarget{}, err
	}
	b.rt.Logger.Info("hetzner lease acquired", "lease", req.LeaseID, "server", target.CloudID,
		"server_type", target.Labels[cloud.LabelServerType], "host", target.Host, "port", target.Port)
	return target, nil
}

// acquire makes the lease's server from the configured system image, or
// from the snapshot src (a fork) when that is not nil.
func (b *Backend) acquire(ctx context.Context, req provider.AcquireRequest, src *hcloud.Image) (target provider.LeaseTarget, err error) {
	clock, log := b.rt.Clock, b.rt.Logger.With("lease", req.LeaseID)
	image := &hcloud.Image{Name: b.cfg.Image}
	if src != nil {
		image = &hcloud.Image{ID: src.ID}
	}
	// A snapshot of a box has the tools already.
	st, err := cloud.StartAcquire(req, clock.Now(), cloud.LabelOptions{Provider: Name, ServerType: b.cfg.ServerTypes[0], Owner: b.cfg.Owner},
		cloud.Bootstrap{Ports: b.cfg.Ports, WorkRoot: b.cfg.WorkRoot, Prepared: b.cfg.Prepared || src != nil})
	if err != nil {
		return target, err
	}
	hostKey, labels, userData := st.HostKey, st.Labels, st.UserData
	deadline := clock.Now().Add(b.cfg.BootTimeout)
	name := serverName(req.LeaseID)

	rb := cloud.NewRollback(log, 0)
	defer rb.Finish(ctx, &err)

	// Each deletion is pushed before its create call and finds what to
	// delete by the lease label, so a create whose answer was lost is
	// rolled back too.
	rb.Add(cloud.StepKey, "ssh key "+name, func(ctx context.Context) error { return b.deleteKeys(ctx, req.LeaseID) })
	key, _, err := b.client.SSHKey.Create(ctx, hcloud.SSHKeyCreateOpts{Name: name, PublicKey: req.PublicKey, Labels: labels})
	if err != nil {
		return target, cloud.Failed(cloud.StepKey, apiError("upload the lease key", err))
	}

	rb.Add(cloud.StepCreate, "server "+name, func(ctx context.Context) error { return b.deleteServers(ctx, req.LeaseID, cloud.StateFailed) })
	var srv *hcloud.Server
	_, err = cloud.FirstWithCapacity(ctx, log, b.cfg.candidates(), func(ctx context.Context, p placement) error {
		l := maps.Clone(labels)
		l[cloud.LabelServerType] = p.ServerType
		res, _, err := b.client.Server.Create(ctx, hcloud.ServerCreateOpts{
			Name: name, ServerType: &hcloud.ServerType{Name: p.ServerType}, Image: image,
			Location: &hcloud.Location{Name: p.Location}, SSHKeys: []*hcloud.SSHKey{key}, UserData: userData,
			Labels: l, StartAfterCreate: hcloud.Ptr(true),
			PublicNet: &hcloud.ServerCreatePublicNet{EnableIPv4: true, EnableIPv6: true},
		})
		if err != nil {
			return apiError("create server ("+p.String()+")", err)
		}
		if res.Server == nil {
			return errors.New("create server (" + p.String() + "): the API returned no server")
		}
		srv = res.Server
		log.Info("hetzner server created", "server", srv.ID, "placement", p.String())
		return nil
	})
	if err != nil {
		return target, cloud.Failed(cloud.StepCreate, err)
	}

	srv, ip, err := b.waitAddress(ctx, srv.ID, deadline)
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

	ready := cloud.WithSSHPort(cloud.WithState(srv.Labels, cloud.StateReady), port)
	updated, _, err := b.client.Server.Update(ctx, srv, hcloud.ServerUpdateOpts{Labels: ready})
	if err == nil && updated == nil {
		err = fmt.Errorf("server %d is gone: %w", srv.ID, provider.ErrNotFound)
	}
	if err != nil {
		return target, cloud.Failed(cloud.StepLabel, apiError("label the server ready", err))
	}
	return b.target(updated)
}

// waitAddress polls the server until it runs and has a public IPv4
// address, or the deadline passes.
func (b *Backend) waitAddress(ctx context.Context, id int64, deadline time.Time) (*hcloud.Server, string, error) {
	clock := b.rt.Clock
	pace := cloud.NewBackoff(b.cfg.PollInterval)
	for {
		srv, _, err := b.client.Server.GetByID(ctx, id)
		switch {
		case err != nil:
			return nil, "", apiError(fmt.Sprintf("read server %d", id), err)
		case srv == nil:
			return nil, "", fmt.Errorf("server %d disappeared while booting: %w", id, provider.ErrNotFound)
		}
		ip := publicIP(srv)
		if srv.Status == hcloud.ServerStatusRunning && ip != "" {
			return srv, ip, nil
		}
		left := deadline.Sub(clock.Now())
		if left <= 0 {
			return nil, "", fmt.Errorf("server %d is %s with address %q after %s: %w", id, srv.Status, ip, b.cfg.BootTimeout, provider.ErrTransient)
		}
		select {
		case <-ctx.Done():
			return nil, "", fmt.Errorf("wait for the address of server %d: %w", id, ctx.Err())
		case <-clock.After(min(pace.Next(), left)):
		}
	}
}

// publicIP is the server's public IPv4 address, or "".
func publicIP(s *hcloud.Server) string {
	if ip := s.PublicNet.IPv4.IP; ip != nil && !ip.IsUnspecified() {
		return ip.String()
	}
	return ""
}

// target describes the box of server s from its labels.
func (b *Backend) target(s *hcloud.Server) (provider.LeaseTarget, error) {
	info, err := cloud.ParseLabels(s.Labels)
	if err != nil {
		return provider.LeaseTarget{}, fmt.Errorf("server %d: %w", s.ID, err)
	}
	t := provider.LeaseTarget{CloudID: cloudID(s.ID), User: cloud.DefaultUser, WorkRoot: b.cfg.WorkRoot}
	info.Apply(&t)
	if t.Port == 0 {
		t.Port = b.cfg.Ports[0]
	}
	if ip := publicIP(s); ip != "" {
		t.Host, t.Port = b.cfg.MapAddress(ip, t.Port)
	}
	if s.Status != hcloud.ServerStatusRunning {
		t.State = string(s.Status)
	}
	return t, nil
}

// selector renders labels as a Hetzner label selector.
func selector(labels map[string]string) string {
	parts := make([]string, 0, len(labels))
	for _, k := range slices.Sorted(maps.Keys(labels)) {
		parts = append(parts, k+"=="+labels[k])
	}
	return strings.Join(parts, ",")
}

// servers lists crabbox's servers of this provider matching extra labels.
func (b *Backend) servers(ctx context.Context, leaseID string, extra map[string]string) ([]*hcloud.Server, error) {
	sel := cloud.Ownership(Name, leaseID)
	maps.Copy(sel, extra)
	out, err := b.client.Server.AllWithOpts(ctx, hcloud.ServerListOpts{ListOpts: hcloud.ListOpts{LabelSelector: selector(sel)}})
	if err != nil {
		return nil, apiError("list servers", err)
	}
	return out, nil
}

// Resolve finds the running server of a lease by lease ID or slug.
func (b *Backend) Resolve(ctx context.Context, req provider.ResolveRequest) (provider.LeaseTarget, error) {
	t, err := b.resolve(ctx, req.ID)
	if err != nil {
		return provider.LeaseTarget{}, fmt.Errorf("resolve hetzner lease %s: %w", req.ID, err)
	}
	return t, nil
}

func (b *Backend) resolve(ctx context.Context, ref string) (provider.LeaseTarget, error) {
	srv, err := cloud.ResolveLive(ctx, ref, func(ctx context.Context, leaseID, slug string) ([]*hcloud.Server, error) {
		if slug != "" {
			return b.servers(ctx, "", map[string]string{cloud.LabelSlug: slug})
		}
		return b.servers(ctx, leaseID, nil)
	}, live, "server", func(s *hcloud.Server) any { return s.ID })
	if err != nil {
		return provider.LeaseTarget{}, err
	}
	return b.target(srv)
}

// live reports whether s is a running box of a lease that is ready.
func live(s *hcloud.Server) bool {
	st := s.Labels[cloud.LabelState]
	return s.Status == hcloud.ServerStatusRunning && (st == cloud.StateReady || st == cloud.StateRunning)
}

// List returns every crabbox server of the provider, whatever its state,
// with its labels. Servers whose labels do not parse are logged and left
// out.
func (b *Backend) List(ctx context.Context, _ provider.ListRequest) ([]provider.LeaseTarget, error) {
	all, err := b.servers(ctx, "", nil)
	if err != nil {
		return nil, fmt.Errorf("list hetzner leases: %w", err)
	}
	return cloud.Targets(b.rt.Logger, all, b.target, "hetzner server with unreadable labels", "server",
		func(s *hcloud.Server) any { return s.ID }), nil
}

// Touch records activity on the lease's server: its last_touched_at and
// expires_at labels.
func (b *Backend) Touch(ctx context.Context, req provider.TouchRequest) (provider.LeaseTarget, error) {
	t, err := b.touch(ctx, req)
	if err != nil {
		return provider.LeaseTarget{}, fmt.Errorf("touch hetzner lease %s: %w", req.Lease.LeaseID, err)
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
	updated, _, err := b.client.Server.Update(ctx, srv, hcloud.ServerUpdateOpts{Labels: cloud.Touch(srv.Labels, req.Now, req.ExpiresAt)})
	if err == nil && updated == nil {
		err = fmt.Errorf("server %d is gone: %w", srv.ID, provider.ErrNotFound)
	}
	if err != nil {
		return provider.LeaseTarget{}, apiError("update labels", err)
	}
	return b.target(updated)
}

// leaseServer finds the live server of lease l: by its cloud ID when the
// target has one (checking the lease label), else by the lease label.
func (b *Backend) leaseServer(ctx context.Context, l provider.LeaseTarget) (*hcloud.Server, error) {
	if !lease.IsID(l.LeaseID) {
		return nil, fmt.Errorf("lease ID %q is not a crabbox lease ID", l.LeaseID)
	}
	if id, err := strconv.ParseInt(l.CloudID, 10, 64); err == nil && id > 0 {
		srv, _, err := b.client.Server.GetByID(ctx, id)
		if err != nil {
			return nil, apiError(fmt.Sprintf("read server %d", id), err)
		}
		if srv == nil || srv.Labels[cloud.LabelLease] != l.LeaseID || srv.Labels[cloud.LabelProvider] != Name || !live(srv) {
			return nil, fmt.Errorf("server %d is not this lease's running server: %w", id, provider.ErrNotFound)
		}
		return srv, nil
	}
	t, err := b.resolve(ctx, l.LeaseID)
	if err != nil {
		return nil, err
	}
	id, _ := strconv.ParseInt(t.CloudID, 10, 64)
	srv, _, err := b.client.Server.GetByID(ctx, id)
	if err != nil {
		return nil, apiError(fmt.Sprintf("read server %d", id), err)
	}
	if srv == nil {
		return nil, fmt.Errorf("server %d is gone: %w", id, provider.ErrNotFound)
	}
	return srv, nil
}

// ReleaseLease deletes the lease's servers, then its keys, found by the
// lease label. It needs only the lease ID, and succeeds when they are
// already gone.
func (b *Backend) ReleaseLease(ctx context.Context, req provider.ReleaseRequest) error {
	id := req.Lease.LeaseID
	if !lease.IsID(id) {
		return fmt.Errorf("release hetzner lease: lease ID %q is not a crabbox lease ID", id)
	}
	if err := b.deleteServers(ctx, id, cloud.StateReleased); err != nil {
		return fmt.Errorf("release hetzner lease %s: %w", id, err)
	}
	if err := b.deleteKeys(ctx, id); err != nil {
		return fmt.Errorf("release hetzner lease %s: %w", id, err)
	}
	b.rt.Logger.Info("hetzner lease released", "lease", id)
	return nil
}

// deleteServers deletes every server labelled with the lease and waits
// for the deletions to finish. A server it fails to delete it tries to
// label with state orphan (failed or released), so that cleanup deletes it
// as soon as it sees it instead of waiting for a grace period.
func (b *Backend) deleteServers(ctx context.Context, leaseID, orphan string) error {
	servers, err := b.servers(ctx, leaseID, nil)
	if err != nil {
		return err
	}
	var errs []error
	for _, s := range servers {
		if err := b.deleteServer(ctx, s); err != nil {
			errs = append(errs, err)
			if _, _, lerr := b.client.Server.Update(ctx, s, hcloud.ServerUpdateOpts{Labels: cloud.WithState(s.Labels, orphan)}); lerr != nil {
				b.rt.Logger.Warn("hetzner server left behind, unlabelled", "server", s.ID, "lease", leaseID, "err", lerr)
			} else {
				b.rt.Logger.Warn("hetzner server left behind for cleanup", "server", s.ID, "lease", leaseID, "state", orphan)
			}
		}
	}
	return errors.Join(errs...)
}

// deleteServer deletes one server and waits for the deletion to finish.
// A server that is already gone counts as deleted.
func (b *Backend) deleteServer(ctx context.Context, s *hcloud.Server) error {
	res, _, err := b.client.Server.DeleteWithResult(ctx, s)
	if hcloud.IsError(err, hcloud.ErrorCodeNotFound) {
		return nil
	}
	if err != nil {
		return apiError(fmt.Sprintf("delete server %d", s.ID), err)
	}
	if res != nil && res.Action != nil {
		if err := b.client.Action.WaitFor(ctx, res.Action); err != nil {
			return fmt.Errorf("delete server %d: %w", s.ID, err)
		}
	}
	b.rt.Logger.Info("hetzner server deleted", "server", s.ID, "lease", s.Labels[cloud.LabelLease])
	return nil
}

// deleteKeys deletes every SSH key labelled with the lease.
func (b *Backend) deleteKeys(ctx context.Context, leaseID string) error {
	keys, err := b.client.SSHKey.AllWithOpts(ctx, hcloud.SSHKeyListOpts{
		ListOpts: hcloud.ListOpts{LabelSelector: selector(cloud.Ownership(Name, leaseID))},
	})
	if err != nil {
		return apiError("list SSH keys", err)
	}
	var errs []error
	for _, k := range keys {
		_, err := b.client.SSHKey.Delete(ctx, k)
		if err != nil && !hcloud.IsError(err, hcloud.ErrorCodeNotFound) {
			errs = append(errs, apiError(fmt.Sprintf("delete SSH key %d", k.ID), err))
		}
	}
	return errors.Join(errs...)
}

// apiError names the operation and classifies an hcloud error as one of
// the provider's portable errors, keeping the SDK error reachable.
func apiError(op string, err error) error {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("%s: %w", op, err)
	}
	var kind error
	switch {
	case hcloud.IsError(err, hcloud.ErrorCodeResourceUnavailable, hcloud.ErrorCodePlacementError,
		hcloud.ErrorCodeResourceLimitExceeded, hcloud.ErrorCodeNoSpaceLeftInLocation):
		kind = provider.ErrCapacity
	case hcloud.IsError(err, hcloud.ErrorCodeUnauthorized, hcloud.ErrorCodeForbidden):
		kind = provider.ErrUnauthenticated
	case hcloud.IsError(err, hcloud.ErrorCodeNotFound):
		kind = provider.ErrNotFound
	case hcloud.IsError(err, hcloud.ErrorCodeUniquenessError, hcloud.ErrorCodeConflict, hcloud.ErrorCodeLocked):
		kind = provider.ErrConflict
	case hcloud.IsError(err, hcloud.ErrorCodeInvalidInput, hcloud.ErrorCodeInvalidServerType, hcloud.ErrorCodeJSONError,
		hcloud.ErrorUnsupportedError, hcloud.ErrorDeprecatedAPIEndpoint, hcloud.ErrorCodeProtected):
		kind = provider.ErrPrecondition
	default:
		kind = provider.ErrTransient
	}
	return fmt.Errorf("%s: %w: %w", op, kind, err)
}
