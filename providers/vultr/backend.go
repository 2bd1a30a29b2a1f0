package vultr

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"time"

	"github.com/vultr/govultr/v3"

	"github.com/crabbox-dev/crabbox/lease"
	"github.com/crabbox-dev/crabbox/provider"
	"github.com/crabbox-dev/crabbox/providers/internal/cloud"
)

// Backend is the Vultr provider's SSH-lease backend.
type Backend struct {
	cfg    Config
	rt     provider.Runtime
	client *govultr.Client
}

// New returns a backend for cfg. It makes no API call.
func New(cfg Config, rt provider.Runtime) (*Backend, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	rt = rt.WithDefaults()
	base := rt.HTTPClient.Transport
	if base == nil {
		base = http.DefaultTransport
	}
	client := govultr.NewClient(&http.Client{Transport: &apiTransport{key: cfg.APIKey, base: base}, Timeout: rt.HTTPClient.Timeout})
	client.SetUserAgent("crabbox")
	if cfg.Endpoint != "" {
		if err := client.SetBaseURL(cfg.Endpoint); err != nil {
			return nil, fmt.Errorf("vultr provider: option endpoint: %w", err)
		}
	}
	for _, o := range cfg.ClientOptions {
		o(client)
	}
	return &Backend{cfg: cfg, rt: rt, client: client}, nil
}

// apiTransport authenticates every request with the API key and records
// the HTTP status in the calling context (see call): govultr's errors
// carry only the response body.
type apiTransport struct {
	key  string
	base http.RoundTripper
}

type statusKey struct{}

func (t *apiTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+t.key)
	res, err := t.base.RoundTrip(r)
	if status, ok := r.Context().Value(statusKey{}).(*int); ok && res != nil {
		*status = res.StatusCode
	}
	return res, err
}

// call runs one API call and classifies its error (see apiError) by the
// HTTP status of the call's last response.
func (b *Backend) call(ctx context.Context, op string, fn func(ctx context.Context) error) error {
	var status int
	err := fn(context.WithValue(ctx, statusKey{}, &status))
	if err == nil {
		return nil
	}
	if ctx.Err() != nil {
		// govultr reports a cancelled request as text only.
		return fmt.Errorf("%s: %w (%v)", op, ctx.Err(), err)
	}
	return apiError(op, status, err)
}

// apiError names the operation and classifies a govultr error by its HTTP
// status as one of the provider's portable errors.
func apiError(op string, status int, err error) error {
	var kind error
	switch {
	case status == http.StatusUnauthorized || status == http.StatusForbidden:
		kind = provider.ErrUnauthenticated
	case status == http.StatusNotFound:
		kind = provider.ErrNotFound
	case status == http.StatusConflict:
		kind = provider.ErrConflict
	case status >= 400 && status < 500 && status != http.StatusTooManyRequests:
		kind = provider.ErrPrecondition
	default:
		kind = provider.ErrTransient
	}
	return fmt.Errorf("%s: %w: %w", op, kind, err)
}

// Spec describes the Vultr provider.
func (b *Backend) Spec() provider.Spec { return Provider{}.Spec() }

// Acquire creates the lease's instance: create, address, SSH, ready tag.
// If a step fails, or ctx ends, it deletes the instance before returning.
func (b *Backend) Acquire(ctx context.Context, req provider.AcquireRequest) (provider.LeaseTarget, error) {
	target, err := b.acquire(ctx, req)
	if err != nil {
		// The caller (lease.Store.Acquire) names the provider and the lease.
		return provider.LeaseTarget{}, err
	}
	b.rt.Logger.Info("vultr lease acquired", "lease", req.LeaseID, "instance", target.CloudID,
		"plan", target.Labels[cloud.LabelServerType], "host", target.Host, "port", target.Port)
	return target, nil
}

func (b *Backend) acquire(ctx context.Context, req provider.AcquireRequest) (target provider.LeaseTarget, err error) {
	clock, log := b.rt.Clock, b.rt.Logger.With("lease", req.LeaseID)
	st, err := cloud.StartAcquire(req, clock.Now(), cloud.LabelOptions{Provider: Name, ServerType: b.cfg.Plans[0], Owner: b.cfg.Owner},
		cloud.Bootstrap{Ports: b.cfg.Ports, WorkRoot: b.cfg.WorkRoot, Prepared: b.cfg.Prepared})
	if err != nil {
		return target, err
	}
	hostKey, labels, userData := st.HostKey, st.Labels, st.UserData
	deadline := clock.Now().Add(b.cfg.BootTimeout)
	name := instanceName(req.LeaseID)

	rb := cloud.NewRollback(log, 0)
	defer rb.Finish(ctx, &err)

	// The deletion is pushed before the create call and finds what to
	// delete by the lease tag, so a create whose answer was lost is rolled
	// back too.
	rb.Add(cloud.StepCreate, "instance "+name, func(ctx context.Context) error {
		return b.deleteInstances(ctx, req.LeaseID, cloud.StateFailed)
	})
	var inst *govultr.Instance
	_, err = cloud.FirstWithCapacity(ctx, log, b.cfg.candidates(), func(ctx context.Context, p placement) error {
		if err := b.available(ctx, p); err != nil {
			return err
		}
		l := maps.Clone(labels)
		l[cloud.LabelServerType] = p.Plan
		tags, err := tagCodec.Tags(l)
		if err != nil {
			return err
		}
		return b.call(ctx, "create instance ("+p.String()+")", func(ctx context.Context) error {
			got, _, err := b.client.Instance.Create(ctx, &govultr.InstanceCreateReq{
				Region: p.Region, Plan: p.Plan, OsID: b.cfg.OSID, Label: name, Hostname: name, Tags: tags,
				UserData: base64.StdEncoding.EncodeToString([]byte(userData)), EnableIPv6: govultr.BoolToBoolPtr(true),
				ActivationEmail: govultr.BoolToBoolPtr(false),
			})
			if err == nil && (got == nil || got.ID == "") {
				err = errors.New("the API returned no instance")
			}
			if err == nil {
				inst = got
				log.Info("vultr instance created", "instance", inst.ID, "placement", p.String())
			}
			return err
		})
	})
	if err != nil {
		return target, cloud.Failed(cloud.StepCreate, err)
	}

	inst, ip, err := b.waitAddress(ctx, inst.ID, deadline)
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

	ready := cloud.WithSSHPort(cloud.WithState(tagCodec.Labels(inst.Tags), cloud.StateReady), port)
	updated, err := b.retag(ctx, inst.ID, ready)
	if err != nil {
		return target, cloud.Failed(cloud.StepLabel, fmt.Errorf("tag the instance ready: %w", err))
	}
	return b.target(updated)
}

// available fails with provider.ErrCapacity when the region's
// availability list does not offer the plan.
func (b *Backend) available(ctx context.Context, p placement) error {
	var avail *govultr.PlanAvailability
	err := b.call(ctx, "plan availability in "+p.Region, func(ctx context.Context) (err error) {
		avail, _, err = b.client.Region.Availability(ctx, p.Region, "")
		return err
	})
	if err != nil {
		return err
	}
	if avail == nil || !slices.Contains(avail.AvailablePlans, p.Plan) {
		return fmt.Errorf("plan %s is not available in region %s: %w", p.Plan, p.Region, provider.ErrCapacity)
	}
	return nil
}

// waitAddress polls the instance until it is active, running and has a
// public IPv4 address, or the deadline passes.
func (b *Backend) waitAddress(ctx context.Context, id string, deadline time.Time) (*govultr.Instance, string, error) {
	clock := b.rt.Clock
	pace := cloud.NewBackoff(b.cfg.PollInterval)
	for {
		inst, err := b.get(ctx, id)
		if err != nil {
			return nil, "", err
		}
		ip := publicIP(inst)
		if inst.Status == statusActive && inst.PowerStatus == powerRunning && ip != "" {
			return inst, ip, nil
		}
		left := deadline.Sub(clock.Now())
		if left <= 0 {
			return nil, "", fmt.Errorf("instance %s is %s (%s) with address %q after %s: %w", id, inst.Status, inst.PowerStatus, ip, b.cfg.BootTimeout, provider.ErrTransient)
		}
		select {
		case <-ctx.Done():
			return nil, "", fmt.Errorf("wait for the address of instance %s: %w", id, ctx.Err())
		case <-clock.After(min(pace.Next(), left)):
		}
	}
}

// Instance states of the Vultr API.
const (
	statusActive = "active"
	powerRunning = "running"
)

// publicIP is the instance's public IPv4 address, or "" (Vultr reports
// 0.0.0.0 until one is assigned).
func publicIP(inst *govultr.Instance) string {
	if inst.MainIP == "" || inst.MainIP == "0.0.0.0" {
		return ""
	}
	return inst.MainIP
}

func (b *Backend) get(ctx context.Context, id string) (*govultr.Instance, error) {
	var inst *govultr.Instance
	err := b.call(ctx, "read instance "+id, func(ctx context.Context) (err error) {
		inst, _, err = b.client.Instance.Get(ctx, id)
		return err
	})
	if err == nil && inst == nil {
		err = fmt.Errorf("read instance %s: no instance in the answer: %w", id, provider.ErrNotFound)
	}
	return inst, err
}

// retag replaces the instance's tags with labels.
func (b *Backend) retag(ctx context.Context, id string, labels map[string]string) (*govultr.Instance, error) {
	tags, err := tagCodec.Tags(labels)
	if err != nil {
		return nil, fmt.Errorf("tag instance %s: %w", id, err)
	}
	var inst *govultr.Instance
	err = b.call(ctx, "tag instance "+id, func(ctx context.Context) (err error) {
		inst, _, err = b.client.Instance.Update(ctx, id, &govultr.InstanceUpdateReq{Tags: tags})
		return err
	})
	if err == nil && inst == nil {
		err = fmt.Errorf("tag instance %s: no instance in the answer: %w", id, provider.ErrNotFound)
	}
	return inst, err
}

// target describes the box of instance inst from its tags.
func (b *Backend) target(inst *govultr.Instance) (provider.LeaseTarget, error) {
	info, err := cloud.ParseLabels(tagCodec.Labels(inst.Tags))
	if err != nil {
		return provider.LeaseTarget{}, fmt.Errorf("instance %s: %w", inst.ID, err)
	}
	t := provider.LeaseTarget{CloudID: inst.ID, User: cloud.DefaultUser, WorkRoot: b.cfg.WorkRoot}
	info.Apply(&t)
	if t.Port == 0 {
		t.Port = b.cfg.Ports[0]
	}
	if ip := publicIP(inst); ip != "" {
		t.Host, t.Port = b.cfg.MapAddress(ip, t.Port)
	}
	switch {
	case inst.Status != statusActive:
		t.State = inst.Status
	case inst.PowerStatus != powerRunning:
		t.State = inst.PowerStatus
	}
	return t, nil
}

// instances lists crabbox's instances of this provider, of one lease when
// leaseID is set, matching extra labels. Vultr filters by one tag; the
// other labels are checked here.
func (b *Backend) instances(ctx context.Context, leaseID string, extra map[string]string) ([]govultr.Instance, error) {
	want := cloud.Ownership(Name, leaseID)
	maps.Copy(want, extra)
	filter := tagCodec.Tag(cloud.LabelProvider, Name)
	if leaseID != "" {
		filter = tagCodec.Tag(cloud.LabelLease, leaseID)
	}
	var out []govultr.Instance
	opts := &govultr.ListOptions{PerPage: 100, Tag: filter}
	for {
		var page []govultr.Instance
		var meta *govultr.Meta
		err := b.call(ctx, "list instances", func(ctx context.Context) (err error) {
			page, meta, _, err = b.client.Instance.List(ctx, opts)
			return err
		})
		if err != nil {
			return nil, err
		}
		for _, inst := range page {
			if matches(tagCodec.Labels(inst.Tags), want) {
				out = append(out, inst)
			}
		}
		if meta == nil || meta.Links == nil || meta.Links.Next == "" {
			return out, nil
		}
		opts.Cursor = meta.Links.Next
	}
}

func matches(labels, want map[string]string) bool {
	for k, v := range want {
		if got, ok := labels[k]; !ok || got != v {
			return false
		}
	}
	return true
}

// Resolve finds the running instance of a lease by lease ID or slug.
func (b *Backend) Resolve(ctx context.Context, req provider.ResolveRequest) (provider.LeaseTarget, error) {
	t, err := b.resolve(ctx, req.ID)
	if err != nil {
		return provider.LeaseTarget{}, fmt.Errorf("resolve vultr lease %s: %w", req.ID, err)
	}
	return t, nil
}

func (b *Backend) resolve(ctx context.Context, ref string) (provider.LeaseTarget, error) {
	inst, err := cloud.ResolveLive(ctx, ref, func(ctx context.Context, leaseID, slug string) ([]govultr.Instance, error) {
		if slug != "" {
			return b.instances(ctx, "", map[string]string{cloud.LabelSlug: slug})
		}
		return b.instances(ctx, leaseID, nil)
	}, func(inst govultr.Instance) bool { return live(&inst) }, "instance", func(inst govultr.Instance) any { return inst.ID })
	if err != nil {
		return provider.LeaseTarget{}, err
	}
	return b.target(&inst)
}

// live reports whether inst is a running box of a lease that is ready.
func live(inst *govultr.Instance) bool {
	st := tagCodec.Labels(inst.Tags)[cloud.LabelState]
	return inst.Status == statusActive && inst.PowerStatus == powerRunning && (st == cloud.StateReady || st == cloud.StateRunning)
}

// List returns every crabbox instance of the provider, whatever its state.
// Instances whose tags do not parse are logged and left out.
func (b *Backend) List(ctx context.Context, _ provider.ListRequest) ([]provider.LeaseTarget, error) {
	all, err := b.instances(ctx, "", nil)
	if err != nil {
		return nil, fmt.Errorf("list vultr leases: %w", err)
	}
	return cloud.Targets(b.rt.Logger, all, func(inst govultr.Instance) (provider.LeaseTarget, error) { return b.target(&inst) },
		"vultr instance with unreadable tags", "instance", func(inst govultr.Instance) any { return inst.ID }), nil
}

// Touch records activity on the lease's instance: its last_touched_at and
// expires_at tags.
func (b *Backend) Touch(ctx context.Context, req provider.TouchRequest) (provider.LeaseTarget, error) {
	t, err := b.touch(ctx, req)
	if err != nil {
		return provider.LeaseTarget{}, fmt.Errorf("touch vultr lease %s: %w", req.Lease.LeaseID, err)
	}
	return t, nil
}

func (b *Backend) touch(ctx context.Context, req provider.TouchRequest) (provider.LeaseTarget, error) {
	if err := cloud.CheckTouch(req); err != nil {
		return provider.LeaseTarget{}, err
	}
	inst, err := b.leaseInstance(ctx, req.Lease)
	if err != nil {
		return provider.LeaseTarget{}, err
	}
	updated, err := b.retag(ctx, inst.ID, cloud.Touch(tagCodec.Labels(inst.Tags), req.Now, req.ExpiresAt))
	if err != nil {
		return provider.LeaseTarget{}, err
	}
	return b.target(updated)
}

// leaseInstance finds the live instance of lease l: by its cloud ID when
// the target has one (checking the lease tag), else by the lease tag.
func (b *Backend) leaseInstance(ctx context.Context, l provider.LeaseTarget) (*govultr.Instance, error) {
	if !lease.IsID(l.LeaseID) {
		return nil, fmt.Errorf("lease ID %q is not a crabbox lease ID", l.LeaseID)
	}
	id := l.CloudID
	if id == "" {
		t, err := b.resolve(ctx, l.LeaseID)
		if err != nil {
			return nil, err
		}
		id = t.CloudID
	}
	inst, err := b.get(ctx, id)
	if err != nil {
		return nil, err
	}
	labels := tagCodec.Labels(inst.Tags)
	if labels[cloud.LabelLease] != l.LeaseID || labels[cloud.LabelProvider] != Name || !live(inst) {
		return nil, fmt.Errorf("instance %s is not this lease's running instance: %w", id, provider.ErrNotFound)
	}
	return inst, nil
}

// ReleaseLease deletes the lease's instances, found by the lease tag. It
// needs only the lease ID, and succeeds when they are already gone.
func (b *Backend) ReleaseLease(ctx context.Context, req provider.ReleaseRequest) error {
	id := req.Lease.LeaseID
	if !lease.IsID(id) {
		return fmt.Errorf("release vultr lease: lease ID %q is not a crabbox lease ID", id)
	}
	if err := b.deleteInstances(ctx, id, cloud.StateReleased); err != nil {
		return fmt.Errorf("release vultr lease %s: %w", id, err)
	}
	b.rt.Logger.Info("vultr lease released", "lease", id)
	return nil
}

// deleteInstances deletes every instance tagged with the lease. An
// instance it fails to delete it tries to tag with state orphan (failed or
// released), so that cleanup deletes it as soon as it sees it instead of
// waiting for a grace period.
func (b *Backend) deleteInstances(ctx context.Context, leaseID, orphan string) error {
	found, err := b.instances(ctx, leaseID, nil)
	if err != nil {
		return err
	}
	var errs []error
	for _, inst := range found {
		if err := b.deleteInstance(ctx, inst.ID, leaseID); err != nil {
			errs = append(errs, err)
			if _, lerr := b.retag(ctx, inst.ID, cloud.WithState(tagCodec.Labels(inst.Tags), orphan)); lerr != nil {
				b.rt.Logger.Warn("vultr instance left behind, untagged", "instance", inst.ID, "lease", leaseID, "err", lerr)
			} else {
				b.rt.Logger.Warn("vultr instance left behind for cleanup", "instance", inst.ID, "lease", leaseID, "state", orphan)
			}
		}
	}
	return errors.Join(errs...)
}

// deleteInstance deletes one instance; one already gone counts as deleted.
func (b *Backend) deleteInstance(ctx context.Context, id, leaseID string) error {
	err := b.call(ctx, "delete instance "+id, func(ctx context.Context) error { return b.client.Instance.Delete(ctx, id) })
	if err != nil && !errors.Is(err, provider.ErrNotFound) {
		return err
	}
	b.rt.Logger.Info("vultr instance deleted", "instance", id, "lease", leaseID)
	return nil
}
