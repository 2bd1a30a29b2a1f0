package runpod

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/crabbox-dev/crabbox/lease"
	"github.com/crabbox-dev/crabbox/provider"
	"github.com/crabbox-dev/crabbox/providers/internal/cloud"
	"github.com/crabbox-dev/crabbox/providers/runpod/internal/runpodapi"
)

// Backend is the RunPod provider's SSH-lease backend.
type Backend struct {
	cfg   Config
	api   *runpodapi.Client
	clock clockwork.Clock
	log   *slog.Logger

	mu sync.Mutex
	// expiry is the lease expiry this backend last granted or was
	// touched to, by lease ID: pods cannot record it (see the package
	// doc).
	expiry map[string]time.Time
}

// New returns a backend for cfg. It makes no API call.
func New(cfg Config, rt provider.Runtime) (*Backend, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	rt = rt.WithDefaults()
	api, err := runpodapi.New(cfg.Endpoint, cfg.Key, rt.HTTPClient, rt.Clock, cfg.Retry)
	if err != nil {
		return nil, fmt.Errorf("%s provider: %w", Name, err)
	}
	return &Backend{cfg: cfg, api: api, clock: rt.Clock, log: rt.Logger, expiry: map[string]time.Time{}}, nil
}

// Spec describes the RunPod provider.
func (b *Backend) Spec() provider.Spec { return Provider{}.Spec() }

// PodName is the name of a lease's pod.
func PodName(leaseID string) string { return "crabbox-" + strings.ReplaceAll(leaseID, "_", "-") }

// Acquire creates the lease's pod, waits for its public SSH mapping and
// for sshd to answer with the host key the client made. If a step fails,
// or ctx ends, it deletes the pod before returning.
func (b *Backend) Acquire(ctx context.Context, req provider.AcquireRequest) (target provider.LeaseTarget, err error) {
	log := b.log.With("lease", req.LeaseID)
	now := b.clock.Now()
	end := req.CreatedAt.Add(req.TTL)
	if req.TTL > 0 && req.ExpiresAt.After(end) {
		return target, fmt.Errorf("%s provider: expiry %s is past the lease's end %s (created + TTL), when its pod deletes itself: %w",
			Name, req.ExpiresAt.UTC().Format(time.RFC3339), end.UTC().Format(time.RFC3339), provider.ErrPrecondition)
	}
	cl := b.cfg.class()
	st, err := cloud.StartAcquire(req, now,
		cloud.LabelOptions{Provider: Name, ServerType: cl.GPUTypes[0], Owner: b.cfg.Owner, Class: b.cfg.Class, State: cloud.StateReady},
		cloud.Bootstrap{Ports: []int{sshPort}, WorkRoot: b.cfg.WorkRoot, Prepared: b.cfg.Prepared})
	if err != nil {
		return target, fmt.Errorf("%s provider: %w", Name, err)
	}
	labels := st.Labels
	labels[cloud.LabelExpiresAt] = strconv.FormatInt(end.Unix(), 10) // the pod's end: touches cannot move it
	labels[LabelGPUCount] = strconv.Itoa(cl.GPUCount)
	name := PodName(req.LeaseID)
	deadline := now.Add(b.cfg.BootTimeout)

	rb := cloud.NewRollback(log, 0)
	defer rb.Finish(ctx, &err)
	rb.Add(cloud.StepCreate, "pod "+name, func(ctx context.Context) error {
		return b.deleteLease(ctx, req.LeaseID)
	})
	var pod runpodapi.Pod
	_, err = cloud.FirstWithCapacity(ctx, log, cl.GPUTypes, func(ctx context.Context, gpu string) error {
		l := maps.Clone(labels)
		l[cloud.LabelServerType] = cloud.SanitizeValue(gpu)
		in := b.createInput(name, gpu, cl.GPUCount, podEnv(st.UserData, l, end, b.cfg.Endpoint, req.PublicKey))
		var err error
		if pod, err = b.api.CreatePod(ctx, in); err != nil {
			return fmt.Errorf("%d x %s: %w", cl.GPUCount, gpu, err)
		}
		log.Info("runpod pod created", "pod", pod.ID, "gpu", gpu, "count", cl.GPUCount)
		return nil
	})
	if err != nil {
		return target, cloud.Failed(cloud.StepCreate, err)
	}
	if pod, err = b.waitAddress(ctx, pod.ID, deadline); err != nil {
		return target, cloud.Failed(cloud.StepAddress, err)
	}
	if _, err = cloud.WaitForSSH(ctx, cloud.SSHWait{
		Host: pod.PublicIP, Ports: []int{pod.PortMappings[strconv.Itoa(sshPort)]}, HostKey: st.HostKey.PublicKey(), Clock: b.clock,
		Interval: b.cfg.PollInterval, Timeout: max(deadline.Sub(b.clock.Now()), time.Nanosecond),
		Dial: cloud.MappedDial(b.cfg.MapAddress), Log: log,
	}); err != nil {
		return target, cloud.Failed(cloud.StepSSH, err)
	}
	b.setExpiry(req.LeaseID, req.ExpiresAt)
	if target, err = b.target(pod); err != nil {
		return target, err
	}
	log.Info("runpod lease acquired", "pod", pod.ID, "host", target.Host, "port", target.Port, "hourly_usd", target.Labels[LabelHourlyUSD])
	return target, nil
}

// createInput is the create of a lease's pod with gpu types.
func (b *Backend) createInput(name, gpu string, count int, env map[string]string) runpodapi.PodCreateInput {
	noVolume := 0
	return runpodapi.PodCreateInput{
		Name: name, ImageName: b.cfg.Image, CloudType: b.cfg.CloudType, ComputeType: "GPU",
		GPUTypeIDs: []string{gpu}, GPUTypePriority: "custom", GPUCount: count, DataCenterIDs: b.cfg.DataCenters,
		ContainerDiskInGb: b.cfg.ContainerDiskGB, VolumeInGb: &noVolume,
		Ports: []string{strconv.Itoa(sshPort) + "/tcp"}, SupportPublicIP: true, Env: env,
		DockerEntrypoint: entrypoint, DockerStartCmd: []string{startCommand},
	}
}

// waitAddress polls the pod until it runs with a public IP and a public
// port for 22, or the deadline passes.
func (b *Backend) waitAddress(ctx context.Context, id string, deadline time.Time) (runpodapi.Pod, error) {
	pace := cloud.NewBackoff(b.cfg.PollInterval)
	for {
		p, err := b.api.GetPod(ctx, id)
		if err != nil {
			return p, err
		}
		port := p.PortMappings[strconv.Itoa(sshPort)]
		switch {
		case p.DesiredStatus == runpodapi.StatusRunning && p.PublicIP != "" && port > 0:
			return p, nil
		case p.DesiredStatus == runpodapi.StatusExited || p.DesiredStatus == runpodapi.StatusTerminated:
			return p, fmt.Errorf("pod %s is %s before it had an address: %w", id, p.DesiredStatus, provider.ErrTransient)
		}
		left := deadline.Sub(b.clock.Now())
		if left <= 0 {
			return p, fmt.Errorf("pod %s is %s with public IP %q and SSH port %d after %s: %w", id, p.DesiredStatus, p.PublicIP, port, b.cfg.BootTimeout, provider.ErrTransient)
		}
		select {
		case <-ctx.Done():
			return p, fmt.Errorf("wait for the address of pod %s: %w", id, context.Cause(ctx))
		case <-b.clock.After(min(pace.Next(), left)):
		}
	}
}

func (b *Backend) setExpiry(leaseID string, t time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.expiry[leaseID] = t
}

func (b *Backend) expiryOf(leaseID string) (time.Time, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	t, ok := b.expiry[leaseID]
	return t, ok
}

// podLabels reads the pod's labels from its environment, with the state
// released when the pod is stopped (a crabbox pod is stopped only when
// its deletion failed, or by RunPod: either way its lease is over).
func podLabels(p runpodapi.Pod) (map[string]string, error) {
	l, err := decodeLabels(p.Env[LabelsEnv])
	if err != nil {
		return nil, err
	}
	if p.DesiredStatus == runpodapi.StatusExited && l[cloud.LabelCrabbox] == "true" {
		l[cloud.LabelState] = cloud.StateReleased
	}
	return l, nil
}

// ours reports whether p carries crabbox's labels of this provider (and
// of leaseID, when set) and is not terminated.
func ours(p runpodapi.Pod, leaseID string) bool {
	if p.DesiredStatus == runpodapi.StatusTerminated || !strings.HasPrefix(p.Name, "crabbox-") {
		return false
	}
	l, err := podLabels(p)
	return err == nil && l[cloud.LabelCrabbox] == "true" && l[cloud.LabelProvider] == Name &&
		(leaseID == "" || l[cloud.LabelLease] == leaseID && p.Name == PodName(leaseID))
}

// live reports whether p is a running pod of a ready lease.
func live(p runpodapi.Pod) bool {
	l, _ := podLabels(p)
	st := l[cloud.LabelState]
	return p.DesiredStatus == runpodapi.StatusRunning && (st == cloud.StateReady || st == cloud.StateRunning)
}

// pods lists crabbox's pods of this provider: of one lease when leaseID
// is set, else all.
func (b *Backend) pods(ctx context.Context, leaseID string) ([]runpodapi.Pod, error) {
	all, err := b.api.ListPods(ctx)
	if err != nil {
		return nil, err
	}
	return slices.DeleteFunc(all, func(p runpodapi.Pod) bool { return !ours(p, leaseID) }), nil
}

// target describes the box of pod p: its labels, its public address and
// SSH port, its price, and the expiry last granted here (else the pod's
// end).
func (b *Backend) target(p runpodapi.Pod) (provider.LeaseTarget, error) {
	l, err := podLabels(p)
	if err != nil {
		return provider.LeaseTarget{}, fmt.Errorf("pod %s: %w", p.ID, err)
	}
	if p.GPU != nil && p.GPU.ID != "" {
		l[cloud.LabelServerType] = cloud.SanitizeValue(p.GPU.ID)
		if p.GPU.Count > 0 {
			l[LabelGPUCount] = strconv.Itoa(p.GPU.Count)
		}
	}
	if p.CostPerHr > 0 {
		l[LabelHourlyUSD] = strconv.FormatFloat(float64(p.CostPerHr), 'f', -1, 64)
	}
	info, err := cloud.ParseLabels(l)
	if err != nil {
		return provider.LeaseTarget{}, fmt.Errorf("pod %s: %w", p.ID, err)
	}
	t := provider.LeaseTarget{CloudID: p.ID, User: cloud.DefaultUser, WorkRoot: b.cfg.WorkRoot}
	info.Apply(&t)
	if e, ok := b.expiryOf(info.LeaseID); ok && e.Before(t.ExpiresAt) {
		t.ExpiresAt = e
	}
	if port := p.PortMappings[strconv.Itoa(sshPort)]; p.PublicIP != "" && port > 0 {
		t.Host, t.Port = b.cfg.MapAddress(p.PublicIP, port)
	}
	if p.DesiredStatus != runpodapi.StatusRunning {
		t.State = strings.ToLower(p.DesiredStatus)
	}
	return t, nil
}

// Resolve finds the running pod of a lease by lease ID or slug.
func (b *Backend) Resolve(ctx context.Context, req provider.ResolveRequest) (provider.LeaseTarget, error) {
	p, err := b.resolve(ctx, req.ID)
	if err != nil {
		return provider.LeaseTarget{}, fmt.Errorf("resolve %s lease %s: %w", Name, req.ID, err)
	}
	return b.target(p)
}

func (b *Backend) resolve(ctx context.Context, ref string) (runpodapi.Pod, error) {
	return cloud.ResolveLive(ctx, ref, func(ctx context.Context, leaseID, slug string) ([]runpodapi.Pod, error) {
		found, err := b.pods(ctx, leaseID)
		if slug != "" {
			found = slices.DeleteFunc(found, func(p runpodapi.Pod) bool {
				l, _ := podLabels(p)
				return l[cloud.LabelSlug] != slug
			})
		}
		return found, err
	}, live, "pod", func(p runpodapi.Pod) any { return p.ID })
}

// List returns every crabbox pod of the provider, whatever its state.
// Pods whose labels do not parse are logged and left out.
func (b *Backend) List(ctx context.Context, _ provider.ListRequest) ([]provider.LeaseTarget, error) {
	all, err := b.pods(ctx, "")
	if err != nil {
		return nil, fmt.Errorf("list %s leases: %w", Name, err)
	}
	return cloud.Targets(b.log, all, b.target, "runpod pod with unreadable labels", "pod", func(p runpodapi.Pod) any { return p.ID }), nil
}

// Touch records activity on the lease: it checks that its pod runs and
// records the new expiry in this backend, without changing the pod (a
// change may reset it). An expiry past the pod's end (created + TTL, when
// it deletes itself) is refused with provider.ErrPrecondition.
func (b *Backend) Touch(ctx context.Context, req provider.TouchRequest) (provider.LeaseTarget, error) {
	t, err := b.touch(ctx, req)
	if err != nil {
		return provider.LeaseTarget{}, fmt.Errorf("touch %s lease %s: %w", Name, req.Lease.LeaseID, err)
	}
	return t, nil
}

func (b *Backend) touch(ctx context.Context, req provider.TouchRequest) (provider.LeaseTarget, error) {
	if err := cloud.CheckTouch(req); err != nil {
		return provider.LeaseTarget{}, err
	}
	p, err := b.leasePod(ctx, req.Lease)
	if err != nil {
		return provider.LeaseTarget{}, err
	}
	l, err := podLabels(p)
	if err != nil {
		return provider.LeaseTarget{}, fmt.Errorf("pod %s: %w", p.ID, err)
	}
	info, err := cloud.ParseLabels(l)
	if err != nil {
		return provider.LeaseTarget{}, fmt.Errorf("pod %s: %w", p.ID, err)
	}
	if req.ExpiresAt.After(info.ExpiresAt) {
		return provider.LeaseTarget{}, fmt.Errorf("expiry %s is past the lease's end %s (created + TTL), when pod %s deletes itself; RunPod pods cannot be extended: %w",
			req.ExpiresAt.UTC().Format(time.RFC3339), info.ExpiresAt.Format(time.RFC3339), p.ID, provider.ErrPrecondition)
	}
	b.setExpiry(info.LeaseID, req.ExpiresAt)
	t, err := b.target(p)
	if err != nil {
		return t, err
	}
	t.ExpiresAt = req.ExpiresAt
	return t, nil
}

// leasePod finds the running pod of lease l: by its cloud ID when the
// target has one (checking its labels), else by the lease label.
func (b *Backend) leasePod(ctx context.Context, l provider.LeaseTarget) (runpodapi.Pod, error) {
	if !lease.IsID(l.LeaseID) {
		return runpodapi.Pod{}, fmt.Errorf("lease ID %q is not a crabbox lease ID", l.LeaseID)
	}
	if l.CloudID == "" {
		return b.resolve(ctx, l.LeaseID)
	}
	p, err := b.api.GetPod(ctx, l.CloudID)
	if err != nil {
		return p, err
	}
	if !ours(p, l.LeaseID) || !live(p) {
		return runpodapi.Pod{}, fmt.Errorf("pod %s is not this lease's running pod: %w", l.CloudID, provider.ErrNotFound)
	}
	return p, nil
}

// ReleaseLease deletes the lease's pods, found by their labels. It needs
// only the lease ID, and succeeds when they are already gone. A pod it
// cannot delete it stops, so that it no longer resolves and cleanup
// deletes it at once.
func (b *Backend) ReleaseLease(ctx context.Context, req provider.ReleaseRequest) error {
	id := req.Lease.LeaseID
	if !lease.IsID(id) {
		return fmt.Errorf("release %s lease: lease ID %q is not a crabbox lease ID", Name, id)
	}
	if err := b.deleteLease(ctx, id); err != nil {
		return fmt.Errorf("release %s lease %s: %w", Name, id, err)
	}
	b.mu.Lock()
	delete(b.expiry, id)
	b.mu.Unlock()
	b.log.Info("runpod lease released", "lease", id)
	return nil
}

// deleteLease deletes every pod of the lease; one it fails to delete it
// tries to stop.
func (b *Backend) deleteLease(ctx context.Context, leaseID string) error {
	ps, err := b.pods(ctx, leaseID)
	if err != nil {
		return err
	}
	var errs []error
	for _, p := range ps {
		if err := b.delete(ctx, p); err != nil {
			errs = append(errs, err)
			if p.DesiredStatus == runpodapi.StatusExited {
				continue
			}
			if serr := b.api.StopPod(ctx, p.ID); serr != nil {
				b.log.Warn("runpod pod left behind, running", "pod", p.ID, "lease", leaseID, "err", serr)
			} else {
				b.log.Warn("runpod pod left behind, stopped, for cleanup", "pod", p.ID, "lease", leaseID)
			}
		}
	}
	return errors.Join(errs...)
}

// delete deletes pod p; one that is gone counts as deleted (RunPod's
// answer to a delete of an unknown pod is a 400, so a failed delete is
// checked with a read).
func (b *Backend) delete(ctx context.Context, p runpodapi.Pod) error {
	err := b.api.DeletePod(ctx, p.ID)
	if err != nil {
		if _, gerr := b.api.GetPod(ctx, p.ID); !runpodapi.IsNotFound(gerr) {
			return err
		}
	}
	l, _ := podLabels(p)
	b.log.Info("runpod pod deleted", "pod", p.ID, "lease", l[cloud.LabelLease])
	return nil
}

// Cleanup decides for every crabbox pod of the provider whether to delete
// it (cloud.DecideCleanup on its labels: only with a claim of the caller,
// past the pod's end, or stopped), and unless req.DryRun deletes it,
// after reading it again and deciding again.
func (b *Backend) Cleanup(ctx context.Context, req provider.CleanupRequest) ([]provider.CleanupDecision, error) {
	all, err := b.pods(ctx, "")
	if err != nil {
		return nil, fmt.Errorf("clean up %s: %w", Name, err)
	}
	return cloud.Sweep[runpodapi.Pod]{
		Provider: Name, Noun: "pod", Log: b.log,
		View: func(p runpodapi.Pod) (string, map[string]string) {
			l, _ := podLabels(p)
			return p.ID, l
		},
		Reread: func(ctx context.Context, p runpodapi.Pod) (runpodapi.Pod, error) {
			fresh, err := b.api.GetPod(ctx, p.ID)
			if err == nil && !ours(fresh, "") {
				return fresh, fmt.Errorf("pod %s: %w", p.ID, provider.ErrNotFound)
			}
			return fresh, err
		},
		Delete: b.delete,
	}.Run(ctx, req, all)
}

// Doctor checks, without changing anything, that the API key is
// accepted, and reports the pods crabbox has running.
func (b *Backend) Doctor(ctx context.Context) ([]provider.Check, error) {
	all, err := b.api.ListPods(ctx)
	if err != nil {
		return []provider.Check{{Name: "runpod API", Detail: err.Error()}}, nil
	}
	n, cost := 0, 0.0
	for _, p := range all {
		if ours(p, "") && p.DesiredStatus == runpodapi.StatusRunning {
			n++
			cost += float64(p.CostPerHr)
		}
	}
	cl := b.cfg.class()
	return []provider.Check{
		{Name: "runpod API", OK: true, Detail: fmt.Sprintf("API key accepted; %d pods, %d of them crabbox's running at %.2f USD/h", len(all), n, cost)},
		{Name: "class " + b.cfg.Class, OK: true, Detail: fmt.Sprintf("%d x %s, %s cloud, %s", cl.GPUCount, strings.Join(cl.GPUTypes, " | "), b.cfg.CloudType, b.cfg.Image)},
	}, nil
}
