package daytona

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"path"
	"slices"
	"strconv"
	"time"

	"github.com/crabbox-dev/crabbox/lease"
	"github.com/crabbox-dev/crabbox/provider"
	"github.com/crabbox-dev/crabbox/providers/internal/cloud"
)

// LabelWorkRoot records the sandbox's work root (an absolute path), so that
// Status and List return it without asking the sandbox.
const LabelWorkRoot = "work_root"

// Daytona sandbox states the provider tells apart.
const (
	stateStarted     = "started"
	stateError       = "error"
	stateBuildFailed = "build_failed"
	stateDestroyed   = "destroyed"
	stateDestroying  = "destroying"
)

// Backend is the Daytona provider's delegated backend.
type Backend struct {
	cfg Config
	rt  provider.Runtime
	api *client
}

// New returns a backend for cfg. It makes no API call.
func New(cfg Config, rt provider.Runtime) (*Backend, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	rt = rt.WithDefaults()
	return &Backend{cfg: cfg, rt: rt, api: &client{http: rt.HTTPClient, apiURL: cfg.APIURL, toolbox: cfg.ToolboxURL, key: cfg.APIKey}}, nil
}

// Spec describes the Daytona provider.
// Spec describes the Daytona provider in delegated mode: the provider's
// spec without its SSH-mode features.
func (b *Backend) Spec() provider.Spec {
	spec := Provider{}.Spec()
	spec.Features = slices.DeleteFunc(spec.Features, func(f provider.Feature) bool {
		return f == provider.FeatureSSH || f == provider.FeatureSSHLogin || f == provider.FeaturePTY
	})
	return spec
}

// Warmup creates the lease's sandbox and waits until it has started. If a
// step fails, or ctx ends, it deletes the sandbox (found by its name, so a
// create whose answer was lost is deleted too) before returning; a sandbox
// it cannot delete it labels failed, so that cleanup deletes it at once.
func (b *Backend) Warmup(ctx context.Context, req provider.WarmupRequest) (provider.LeaseView, error) {
	v, err := b.warmup(ctx, req)
	if err != nil {
		return provider.LeaseView{}, fmt.Errorf("daytona warmup %s: %w", req.LeaseID, err)
	}
	b.rt.Logger.Info("daytona sandbox ready", "lease", req.LeaseID, "sandbox", v.CloudID)
	return v, nil
}

func (b *Backend) warmup(ctx context.Context, req provider.WarmupRequest) (provider.LeaseView, error) {
	s, err := b.start(ctx, req)
	if err != nil {
		return provider.LeaseView{}, err
	}
	return b.view(s)
}

// start creates the lease's sandbox, labelled with the lease's ownership
// labels, waits until it has started, records its work root in its
// labels and labels it ready; it returns the sandbox as labelled. If a
// step fails, or ctx ends, it deletes the sandbox (or labels it failed).
func (b *Backend) start(ctx context.Context, req provider.WarmupRequest) (s sandbox, err error) {
	now := b.rt.Clock.Now().UTC()
	if !req.ExpiresAt.After(now) {
		return s, fmt.Errorf("expiry %s is not after now (%s)", req.ExpiresAt.Format(time.RFC3339), now.Format(time.RFC3339))
	}
	if _, ok := req.Labels[LabelWorkRoot]; ok {
		return s, fmt.Errorf("label %q is reserved for crabbox", LabelWorkRoot)
	}
	labels, err := cloud.NewLabels(provider.AcquireRequest{
		LeaseID: req.LeaseID, Slug: req.Slug, TTL: req.TTL, IdleTimeout: req.IdleTimeout,
		CreatedAt: now, ExpiresAt: req.ExpiresAt, Labels: req.Labels,
	}, cloud.LabelOptions{Provider: Name, Owner: b.cfg.Owner})
	if err != nil {
		return s, err
	}
	body := createSandbox{
		Name: sandboxName(req.LeaseID), Snapshot: b.cfg.Snapshot, User: b.cfg.User, Target: b.cfg.Target,
		Labels: labels, AutoStopInterval: minutesUntil(now, req.ExpiresAt), AutoDeleteInterval: 0,
	}
	if b.cfg.Image != "" {
		body.BuildInfo = &buildInfo{DockerfileContent: "FROM " + b.cfg.Image + "\n"}
	}

	rb := cloud.NewRollback(b.rt.Logger.With("lease", req.LeaseID), 0)
	defer rb.Finish(ctx, &err)
	rb.Add(cloud.StepCreate, "sandbox "+body.Name, func(ctx context.Context) error { return b.deleteOrMark(ctx, body.Name) })
	if err := b.api.json(ctx, "create sandbox", jsonBody(http.MethodPost, b.api.api("sandbox"), body), &s); err != nil {
		return s, err
	}
	if s.ID == "" {
		return s, errors.New("create sandbox: the answer has no sandbox ID")
	}
	if s, err = b.waitStarted(ctx, s); err != nil {
		return s, err
	}
	root := b.cfg.WorkRoot
	if root == "" {
		if root, err = b.homeWorkRoot(ctx, s); err != nil {
			return s, err
		}
	}
	ready := cloud.WithState(s.Labels, cloud.StateReady)
	ready[LabelWorkRoot] = root
	if err := b.replaceLabels(ctx, s.ID, ready); err != nil {
		return s, err
	}
	s.Labels = ready
	return s, nil
}

// minutesUntil is the whole minutes from now to t, rounded up, at least 1:
// Daytona's intervals are in minutes, and 0 would disable auto-stop.
func minutesUntil(now, t time.Time) int {
	return max(1, int((t.Sub(now)+time.Minute-1)/time.Minute))
}

// waitStarted polls sandbox s until it has started, fails, or the start
// timeout passes.
func (b *Backend) waitStarted(ctx context.Context, s sandbox) (sandbox, error) {
	deadline := b.rt.Clock.Now().Add(b.cfg.StartTimeout)
	for {
		switch s.State {
		case stateStarted:
			return s, nil
		case stateError, stateBuildFailed, stateDestroyed, stateDestroying:
			return s, fmt.Errorf("sandbox %s is %s: %s", s.ID, s.State, s.ErrorReason)
		}
		if !b.rt.Clock.Now().Before(deadline) {
			return s, fmt.Errorf("sandbox %s has not started within %s (state %q): %w", s.ID, b.cfg.StartTimeout, s.State, provider.ErrTransient)
		}
		select {
		case <-ctx.Done():
			return s, fmt.Errorf("wait for sandbox %s to start: %w", s.ID, ctx.Err())
		case <-b.rt.Clock.After(b.cfg.PollInterval):
		}
		var err error
		if s, err = b.get(ctx, s.ID); err != nil {
			return s, err
		}
	}
}

// homeWorkRoot asks the sandbox for its user's home directory and returns
// the work root in it.
func (b *Backend) homeWorkRoot(ctx context.Context, s sandbox) (string, error) {
	u, err := b.api.toolboxURL(s, "user-home-dir")
	if err != nil {
		return "", err
	}
	var home struct {
		Dir string `json:"dir"`
	}
	if err := b.api.json(ctx, "read the sandbox's home directory", request{method: http.MethodGet, url: u}, &home); err != nil {
		return "", err
	}
	if err := checkSandboxPath(home.Dir); err != nil {
		return "", fmt.Errorf("the sandbox's home directory: %w", err)
	}
	return path.Join(home.Dir, "crabbox"), nil
}

func (b *Backend) get(ctx context.Context, idOrName string) (sandbox, error) {
	var s sandbox
	err := b.api.json(ctx, "read sandbox "+idOrName, request{method: http.MethodGet, url: b.api.api("sandbox", idOrName)}, &s)
	return s, err
}

func (b *Backend) replaceLabels(ctx context.Context, id string, labels map[string]string) error {
	return b.api.json(ctx, "label sandbox "+id, jsonBody(http.MethodPut, b.api.api("sandbox", id, "labels"), sandboxLabels{Labels: labels}), nil)
}

// deleteSandbox deletes a sandbox by ID or name; one that is gone counts
// as deleted.
func (b *Backend) deleteSandbox(ctx context.Context, idOrName string) error {
	err := b.api.json(ctx, "delete sandbox "+idOrName, request{method: http.MethodDelete, url: b.api.api("sandbox", idOrName)}, nil)
	if isNotFound(err) {
		return nil
	}
	return err
}

// deleteOrMark deletes a sandbox; when that fails it tries to label it
// failed, so that cleanup deletes it as soon as it sees it.
func (b *Backend) deleteOrMark(ctx context.Context, name string) error {
	err := b.deleteSandbox(ctx, name)
	if err == nil {
		return nil
	}
	if s, gerr := b.get(ctx, name); gerr == nil && ours(s) {
		if lerr := b.replaceLabels(ctx, s.ID, cloud.WithState(s.Labels, cloud.StateFailed)); lerr == nil {
			b.rt.Logger.Warn("daytona sandbox left behind for cleanup", "sandbox", s.ID, "state", cloud.StateFailed)
		}
	}
	return err
}

// ours reports whether s carries this provider's ownership labels.
func ours(s sandbox) bool {
	return s.Labels[cloud.LabelCrabbox] == "true" && s.Labels[cloud.LabelProvider] == Name && lease.IsID(s.Labels[cloud.LabelLease])
}

// live reports whether s is a sandbox that runs or can run commands.
func live(s sandbox) bool {
	switch s.State {
	case stateDestroyed, stateDestroying, stateError, stateBuildFailed:
		return false
	}
	return s.DesiredState != stateDestroyed
}

// list returns this provider's sandboxes whose labels include extra,
// following the cursor through every page.
func (b *Backend) list(ctx context.Context, extra map[string]string) ([]sandbox, error) {
	sel := cloud.Ownership(Name, "")
	maps.Copy(sel, extra)
	filter, err := json.Marshal(sel)
	if err != nil {
		return nil, err
	}
	var out []sandbox
	cursor := ""
	for page := 1; ; page++ {
		q := url.Values{"labels": {string(filter)}, "limit": {"100"}}
		if cursor != "" {
			q.Set("cursor", cursor)
		}
		var res listSandboxes
		if err := b.api.json(ctx, "list sandboxes", request{method: http.MethodGet, url: withQuery(b.api.api("sandbox"), q)}, &res); err != nil {
			return nil, err
		}
		for _, s := range res.Items {
			if ours(s) {
				out = append(out, s)
			}
		}
		if res.NextCursor == nil || *res.NextCursor == "" {
			return out, nil
		}
		if *res.NextCursor == cursor || page > 1000 {
			return nil, fmt.Errorf("list sandboxes: the cursor %q does not advance", *res.NextCursor)
		}
		cursor = *res.NextCursor
	}
}

// find returns the live sandbox of a lease ID (by name, checking its
// labels) or slug (by label).
func (b *Backend) find(ctx context.Context, ref string) (sandbox, error) {
	switch {
	case lease.IsID(ref):
		s, err := b.get(ctx, sandboxName(ref))
		if err != nil {
			return s, err
		}
		if !ours(s) || s.Labels[cloud.LabelLease] != ref || !live(s) {
			return s, fmt.Errorf("sandbox %s is not a live sandbox of lease %s (state %q): %w", s.ID, ref, s.State, provider.ErrNotFound)
		}
		return s, nil
	case lease.ValidSlug(ref):
		found, err := b.list(ctx, map[string]string{cloud.LabelSlug: ref})
		if err != nil {
			return sandbox{}, err
		}
		var lives []sandbox
		for _, s := range found {
			if live(s) {
				lives = append(lives, s)
			}
		}
		switch len(lives) {
		case 0:
			return sandbox{}, fmt.Errorf("no live sandbox with slug %q: %w", ref, provider.ErrNotFound)
		case 1:
			return lives[0], nil
		default:
			return sandbox{}, fmt.Errorf("%d live sandboxes with slug %q (%s, %s, ...): %w", len(lives), ref, lives[0].ID, lives[1].ID, provider.ErrConflict)
		}
	default:
		return sandbox{}, fmt.Errorf("%q is neither a lease ID nor a slug: %w", ref, provider.ErrNotFound)
	}
}

// view is the lease view of one of this provider's sandboxes.
func (b *Backend) view(s sandbox) (provider.LeaseView, error) {
	info, err := cloud.ParseLabels(s.Labels)
	if err != nil {
		return provider.LeaseView{}, fmt.Errorf("sandbox %s: %w", s.ID, err)
	}
	root := s.Labels[LabelWorkRoot]
	if root != "" && checkSandboxPath(root) != nil {
		return provider.LeaseView{}, fmt.Errorf("sandbox %s: label %s=%q is not an absolute path", s.ID, LabelWorkRoot, root)
	}
	state := s.State
	if info.State != cloud.StateReady && info.State != "" {
		state = info.State
	}
	return provider.LeaseView{
		ID: info.LeaseID, Slug: info.Slug, Provider: Name, CloudID: s.ID, State: state,
		Labels: info.Labels, CreatedAt: info.CreatedAt, ExpiresAt: info.ExpiresAt, WorkRoot: root,
	}, nil
}

// Status returns the live lease with the ID or slug req.ID.
func (b *Backend) Status(ctx context.Context, req provider.StatusRequest) (provider.LeaseView, error) {
	s, err := b.find(ctx, req.ID)
	if err == nil {
		var v provider.LeaseView
		if v, err = b.view(s); err == nil {
			return v, nil
		}
	}
	return provider.LeaseView{}, fmt.Errorf("daytona status %s: %w", req.ID, err)
}

// List returns every sandbox with this provider's ownership labels,
// whoever made it. Sandboxes whose labels do not parse are logged and left
// out.
func (b *Backend) List(ctx context.Context, _ provider.ListRequest) ([]provider.LeaseView, error) {
	all, err := b.list(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("daytona list: %w", err)
	}
	out := make([]provider.LeaseView, 0, len(all))
	for _, s := range all {
		v, err := b.view(s)
		if err != nil {
			b.rt.Logger.Warn("daytona sandbox with unreadable labels", "sandbox", s.ID, "err", err)
			continue
		}
		out = append(out, v)
	}
	return out, nil
}

// Stop deletes the lease's sandbox (by name for a lease ID, by label for a
// slug). A lease that is already gone is stopped.
func (b *Backend) Stop(ctx context.Context, req provider.StopRequest) error {
	if err := b.stop(ctx, req.ID); err != nil {
		return fmt.Errorf("daytona stop %s: %w", req.ID, err)
	}
	b.rt.Logger.Info("daytona lease stopped", "lease", req.ID)
	return nil
}

func (b *Backend) stop(ctx context.Context, ref string) error {
	if lease.IsID(ref) {
		s, err := b.get(ctx, sandboxName(ref))
		switch {
		case isNotFound(err):
			return nil
		case err != nil:
			return err
		case !ours(s) || s.Labels[cloud.LabelLease] != ref:
			return fmt.Errorf("sandbox %s named after lease %s does not carry its labels; left alone", s.ID, ref)
		}
		return b.deleteSandbox(ctx, s.ID)
	}
	if !lease.ValidSlug(ref) {
		return fmt.Errorf("%q is neither a lease ID nor a slug", ref)
	}
	found, err := b.list(ctx, map[string]string{cloud.LabelSlug: ref})
	if err != nil {
		return err
	}
	var errs []error
	for _, s := range found {
		errs = append(errs, b.deleteSandbox(ctx, s.ID))
	}
	return errors.Join(errs...)
}

// Touch makes the sandbox live until at least req.ExpiresAt: Daytona stops
// a sandbox once its auto-stop interval has passed since its last
// activity, so the interval becomes the time from that activity (req.Now
// when Daytona reports none) to req.ExpiresAt; its labels record the
// activity and the new expiry.
func (b *Backend) Touch(ctx context.Context, req provider.DelegatedTouchRequest) (provider.LeaseView, error) {
	s, err := b.touch(ctx, req)
	if err == nil {
		var v provider.LeaseView
		if v, err = b.view(s); err == nil {
			return v, nil
		}
	}
	return provider.LeaseView{}, fmt.Errorf("daytona touch %s: %w", req.ID, err)
}

// touch moves the auto-stop interval and the labels of the sandbox of
// req.ID (see Touch) and returns the sandbox as labelled.
func (b *Backend) touch(ctx context.Context, req provider.DelegatedTouchRequest) (sandbox, error) {
	if req.Now.IsZero() || !req.ExpiresAt.After(req.Now) {
		return sandbox{}, fmt.Errorf("expiry %s is not after now (%s)", req.ExpiresAt.Format(time.RFC3339), req.Now.Format(time.RFC3339))
	}
	s, err := b.find(ctx, req.ID)
	if err != nil {
		return sandbox{}, err
	}
	since := req.Now
	if t, err := time.Parse(time.RFC3339Nano, s.LastActivityAt); err == nil {
		since = t
	}
	minutes := strconv.Itoa(minutesUntil(since, req.ExpiresAt))
	if err := b.api.json(ctx, "set the auto-stop interval", request{method: http.MethodPost, url: b.api.api("sandbox", s.ID, "autostop", minutes)}, nil); err != nil {
		return sandbox{}, err
	}
	labels := cloud.Touch(s.Labels, req.Now, req.ExpiresAt)
	if err := b.replaceLabels(ctx, s.ID, labels); err != nil {
		return sandbox{}, err
	}
	s.Labels = labels
	return s, nil
}
