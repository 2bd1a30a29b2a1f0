package nvidiabrev

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/crabbox-dev/crabbox/provider"
	"github.com/crabbox-dev/crabbox/providers/internal/cloud"
	"github.com/crabbox-dev/crabbox/providers/internal/tagcloud"
)

// Backend is the NVIDIA Brev provider's SSH-lease backend.
type Backend struct {
	*tagcloud.Backend
	cfg Config
	rt  provider.Runtime
	api *instances
}

// New returns a backend for cfg. It makes no API call.
func New(cfg Config, rt provider.Runtime) (*Backend, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	rt = rt.WithDefaults()
	c := &client{base: cfg.Endpoint, key: cfg.APIKey, org: cfg.Org, http: rt.HTTPClient, clock: rt.Clock, retries: !cfg.NoRetries}
	b := &Backend{cfg: cfg, rt: rt, api: &instances{c: c, cfg: cfg, codec: cloud.TagCodec{MaxLen: 255}, types: map[string]string{}}}
	b.Backend = b.lifecycle(cfg.Sizes)
	return b, nil
}

// lifecycle is the tag cloud lifecycle trying sizes (the configured
// ones, or "auto" as a placeholder when the GPU class picks them).
func (b *Backend) lifecycle(sizes []string) *tagcloud.Backend {
	o := b.cfg.Options
	o.Sizes = sizes
	if len(o.Sizes) == 0 {
		o.Sizes = []string{"auto"}
	}
	return tagcloud.New(tagcloud.Config{
		Options: o, Provider: Name, Codec: b.api.codec, Ports: b.cfg.Ports,
		PollInterval: b.cfg.PollInterval, MapAddress: b.cfg.MapAddress, CallTimeout: b.cfg.CallTimeout,
	}, b.api, b.rt)
}

// Spec describes the provider.
func (b *Backend) Spec() provider.Spec { return spec() }

var slugRE = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[a-z0-9][a-z0-9-]*$`) })

// Acquire creates the lease's instance. It refuses, before any API call,
// a slug that does not fit a Brev name and an expiry the name cannot
// hold; without sizes it picks the instance types of the GPU class.
func (b *Backend) Acquire(ctx context.Context, req provider.AcquireRequest) (provider.LeaseTarget, error) {
	if req.Slug != "" && (len(req.Slug) > MaxSlugLength || !slugRE().MatchString(req.Slug)) {
		return provider.LeaseTarget{}, fmt.Errorf("%s provider: slug %q: Brev instance names have room for at most %d lowercase letters, digits and '-' of a slug", Name, req.Slug, MaxSlugLength)
	}
	if req.ExpiresAt.Unix() > maxExpiry {
		return provider.LeaseTarget{}, fmt.Errorf("%s provider: expiry %s is beyond what a Brev instance name records", Name, req.ExpiresAt.UTC().Format("2006-01-02"))
	}
	lc := b.Backend
	if len(b.cfg.Sizes) == 0 {
		sizes, err := b.api.classSizes(ctx)
		if err != nil {
			return provider.LeaseTarget{}, fmt.Errorf("%s provider: choose instance types for %s: %w", Name, b.api.class(), err)
		}
		lc = b.lifecycle(sizes)
	}
	t, err := lc.Acquire(ctx, req)
	if err != nil {
		return t, err
	}
	if usd, ok := b.api.price(t.CloudID); ok {
		t.Labels = maps.Clone(t.Labels)
		if t.Labels == nil {
			t.Labels = map[string]string{}
		}
		t.Labels[LabelHourlyUSD] = usd
	}
	return t, nil
}

// instances maps Brev's API onto the tag cloud API: a machine's tags are
// the lifecycle labels its name carries (names.go), plus server_type.
type instances struct {
	c     *client
	cfg   Config
	codec cloud.TagCodec

	mu    sync.Mutex
	types map[string]string // instance ID -> price of its type
}

// class names the GPU class for messages.
func (a *instances) class() string {
	g := a.cfg.GPU
	if g == "" {
		g = "any GPU"
	}
	if a.cfg.GPUCount > 0 {
		return fmt.Sprintf("%dx %s", a.cfg.GPUCount, g)
	}
	return g
}

// fits reports whether t has the configured GPU class.
func (a *instances) fits(t instanceType) bool {
	if a.cfg.GPU == "" && a.cfg.GPUCount == 0 {
		return true
	}
	for _, g := range t.SupportedGPUs {
		if (a.cfg.GPU == "" || strings.EqualFold(g.Name, a.cfg.GPU)) && (a.cfg.GPUCount == 0 || g.Count == a.cfg.GPUCount) {
			return true
		}
	}
	return false
}

func gpus(t instanceType) string {
	var out []string
	for _, g := range t.SupportedGPUs {
		out = append(out, fmt.Sprintf("%dx %s", g.Count, g.Name))
	}
	if len(out) == 0 {
		return "no GPU"
	}
	return strings.Join(out, ", ")
}

func hourly(t instanceType) (float64, bool) {
	v, err := strconv.ParseFloat(strings.TrimSpace(t.BasePrice.Amount), 64)
	return v, err == nil && v >= 0 && (t.BasePrice.Currency == "" || strings.EqualFold(t.BasePrice.Currency, "USD"))
}

// classSizes lists the instance types of the GPU class that have
// capacity somewhere, cheapest first (unpriced last), at most
// MaxAutoSizes.
func (a *instances) classSizes(ctx context.Context) ([]string, error) {
	all, err := a.c.instanceTypes(ctx)
	if err != nil {
		return nil, fmt.Errorf("list instance types: %w", err)
	}
	var fit []instanceType
	for _, t := range all {
		if a.fits(t) && len(t.WorkspaceGroups) > 0 && validType(t.Type) {
			fit = append(fit, t)
		}
	}
	slices.SortStableFunc(fit, func(x, y instanceType) int {
		px, okx := hourly(x)
		py, oky := hourly(y)
		if okx != oky {
			if okx {
				return -1
			}
			return 1
		}
		return cmp.Compare(px, py)
	})
	if len(fit) == 0 {
		return nil, fmt.Errorf("Brev offers the organization no instance type with %s now: %w", a.class(), provider.ErrCapacity)
	}
	var out []string
	for _, t := range fit[:min(len(fit), MaxAutoSizes)] {
		out = append(out, t.Type)
	}
	return out, nil
}

// price is the hourly price of instance id's type, when it was created
// by this backend and Brev lists a price.
func (a *instances) price(id string) (string, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	p, ok := a.types[id]
	return p, ok
}

// Create creates the instance of s.Size in workspace group s.Region (or
// the type's first group, for auto). The type must be listed for the
// organization with the GPU class; a type listed without the group (or
// any group) has no capacity there, as Brev's CLI reads the listing.
func (a *instances) Create(ctx context.Context, s tagcloud.Spec) (tagcloud.Machine, error) {
	if a.cfg.onAttempt != nil {
		a.cfg.onAttempt(s.Size, s.Region)
	}
	labels := a.codec.Labels(s.Tags)
	name, err := encodeName(labels, a.cfg.Ports)
	if err != nil {
		return tagcloud.Machine{}, err
	}
	all, err := a.c.instanceTypes(ctx)
	if err != nil {
		return tagcloud.Machine{}, fmt.Errorf("list instance types: %w", err)
	}
	i := slices.IndexFunc(all, func(t instanceType) bool { return t.Type == s.Size })
	if i < 0 {
		return tagcloud.Machine{}, fmt.Errorf("instance type %q is not offered to the organization (see `brev search`): %w", s.Size, provider.ErrPrecondition)
	}
	t := all[i]
	if !a.fits(t) {
		return tagcloud.Machine{}, fmt.Errorf("instance type %q has %s, not the class's %s: %w", s.Size, gpus(t), a.class(), provider.ErrPrecondition)
	}
	group := ""
	for _, g := range t.WorkspaceGroups {
		if s.Region == DefaultRegion || g.ID == s.Region {
			group = g.ID
			break
		}
	}
	if group == "" {
		return tagcloud.Machine{}, fmt.Errorf("instance type %q has no capacity in workspace group %s now: %w", s.Size, s.Region, provider.ErrCapacity)
	}
	keep := false
	w, err := a.c.createWorkspace(ctx, createWorkspace{
		Name: name, WorkspaceGroupID: group, InstanceType: s.Size, DiskStorage: a.cfg.Disk,
		Description: "crabbox lease " + labels[cloud.LabelLease], IsStoppable: &keep, VMOnlyMode: true,
		VMBuild:       &vmBuild{LifeCycleScriptAttr: &lifeCycleScript{Name: "crabbox-bootstrap", Script: s.UserData}},
		PortMappings:  map[string]string{},
		FirewallRules: firewall(a.cfg.Ports),
		Labels:        createLabels(labels, a.cfg.Owner), WorkspaceVersion: "v1",
	})
	if err != nil {
		return tagcloud.Machine{}, fmt.Errorf("create instance %s: %w", name, err)
	}
	if usd, ok := hourly(t); ok {
		a.mu.Lock()
		a.types[w.ID] = strconv.FormatFloat(usd, 'f', -1, 64)
		a.mu.Unlock()
	}
	return a.machine(w), nil
}

// firewall opens the SSH ports other than 22 (which Brev opens).
func firewall(ports []int) []firewallRule {
	var out []firewallRule
	for _, p := range ports {
		if p != 22 {
			out = append(out, firewallRule{Port: strconv.Itoa(p), AllowedIPs: "all"})
		}
	}
	return out
}

// nameLabels are the labels the name carries (or that are not
// recorded at creation): never read from the create-time labels.
var nameLabels = map[string]bool{
	cloud.LabelCrabbox: true, cloud.LabelCreatedBy: true, cloud.LabelProvider: true, cloud.LabelLease: true,
	cloud.LabelSlug: true, cloud.LabelState: true, cloud.LabelKeep: true, cloud.LabelExpiresAt: true,
	cloud.LabelLastTouchedAt: true, cloud.LabelSSHPort: true, cloud.LabelHostKey: true,
	cloud.LabelServerType: true, cloud.LabelTarget: true,
}

// createLabels are the create-time labels: the labels that do not
// change during a lease (the owner, the class, creation time, TTLs, the
// caller's labels) and crabbox's identity, for people reading Brev's
// console. The changing ones live in the name.
func createLabels(l map[string]string, owner string) map[string]string {
	out := map[string]string{}
	for k, v := range l {
		if !nameLabels[k] || k == cloud.LabelCrabbox || k == cloud.LabelProvider || k == cloud.LabelLease || k == cloud.LabelSlug {
			out[k] = v
		}
	}
	if owner != "" {
		out[cloud.LabelOwner] = cloud.SanitizeValue(owner)
	}
	return out
}

// machine is a workspace as the lifecycle sees it: the labels of its
// name, the server_type of its instance type and, when Brev returns
// them, the lasting labels recorded at creation. A workspace whose name
// is not crabbox's has no tags.
func (a *instances) machine(w workspace) tagcloud.Machine {
	m := tagcloud.Machine{ID: w.ID, Running: w.Status == statusRunning, Status: strings.ToLower(w.Status), IPv4: w.DNS}
	if !m.Running {
		m.IPv4 = ""
	}
	l, ok := decodeName(w.Name, a.cfg.Ports)
	if !ok {
		return m
	}
	for k, v := range w.Labels {
		if !nameLabels[k] && cloud.CheckKey(k) == nil && len(k) <= cloud.MaxLabelLength {
			l[k] = cloud.SanitizeValue(v)
		}
	}
	if w.InstanceType != "" {
		l[cloud.LabelServerType] = cloud.SanitizeValue(strings.ReplaceAll(w.InstanceType, ":", "-"))
	}
	tags, err := a.codec.Tags(l)
	if err != nil {
		return m
	}
	m.Tags = tags
	return m
}

func (a *instances) Get(ctx context.Context, id string) (tagcloud.Machine, error) {
	w, err := a.c.getWorkspace(ctx, id)
	if err != nil {
		return tagcloud.Machine{}, fmt.Errorf("read instance %s: %w", id, err)
	}
	return a.machine(w), nil
}

// List returns the organization's instances carrying tag. Brev's list is
// one array with no pages (brev-cli store.getWorkspaces).
func (a *instances) List(ctx context.Context, tag string) ([]tagcloud.Machine, error) {
	ws, err := a.c.listWorkspaces(ctx)
	if err != nil {
		return nil, fmt.Errorf("list instances: %w", err)
	}
	var out []tagcloud.Machine
	for _, w := range ws {
		if m := a.machine(w); slices.Contains(m.Tags, tag) {
			out = append(out, m)
		}
	}
	return out, nil
}

// SetTags renames the instance to the name of tags' labels.
func (a *instances) SetTags(ctx context.Context, m tagcloud.Machine, tags []string) (tagcloud.Machine, error) {
	name, err := encodeName(a.codec.Labels(tags), a.cfg.Ports)
	if err != nil {
		return tagcloud.Machine{}, err
	}
	w, err := a.c.renameWorkspace(ctx, m.ID, name)
	if err != nil {
		return tagcloud.Machine{}, fmt.Errorf("rename instance %s: %w", m.ID, err)
	}
	return a.machine(w), nil
}

// Delete deletes the instance; one already gone counts as deleted.
func (a *instances) Delete(ctx context.Context, id string) error {
	if err := a.c.deleteWorkspace(ctx, id); err != nil && !errors.Is(err, provider.ErrNotFound) {
		return err
	}
	a.mu.Lock()
	delete(a.types, id)
	a.mu.Unlock()
	return nil
}

// Doctor checks, changing nothing, that the key is accepted for the
// organization and which instance types of the configuration (or the
// GPU class) Brev offers now.
func (b *Backend) Doctor(ctx context.Context) ([]provider.Check, error) {
	ws, err := b.api.c.listWorkspaces(ctx)
	if err != nil {
		return []provider.Check{{Name: "brev API", Detail: fmt.Sprintf("list the organization's instances: %v", err)}}, nil
	}
	n := 0
	for _, w := range ws {
		if _, ok := decodeName(w.Name, b.cfg.Ports); ok {
			n++
		}
	}
	checks := []provider.Check{{Name: "brev API", OK: true, Detail: fmt.Sprintf("key accepted for organization %s (%d instances, %d of crabbox)", b.cfg.Org, len(ws), n)}}
	if len(b.cfg.Sizes) == 0 {
		sizes, err := b.api.classSizes(ctx)
		c := provider.Check{Name: "GPU class " + b.api.class(), OK: err == nil}
		if err != nil {
			c.Detail = err.Error()
		} else {
			c.Detail = "instance types " + strings.Join(sizes, ", ")
		}
		return append(checks, c), nil
	}
	all, err := b.api.c.instanceTypes(ctx)
	if err != nil {
		return append(checks, provider.Check{Name: "instance types", Detail: err.Error()}), nil
	}
	for _, s := range b.cfg.Sizes {
		c := provider.Check{Name: "instance type " + s, Detail: "not offered to the organization"}
		if i := slices.IndexFunc(all, func(t instanceType) bool { return t.Type == s }); i >= 0 {
			t := all[i]
			c.OK = len(t.WorkspaceGroups) > 0 && b.api.fits(t)
			c.Detail = fmt.Sprintf("%s, %d vCPUs, %s, %s %s/h, %d workspace groups with capacity", gpus(t), t.VCPU, t.Memory, t.BasePrice.Amount, t.BasePrice.Currency, len(t.WorkspaceGroups))
			if !b.api.fits(t) {
				c.Detail += "; not the class's " + b.api.class()
			}
		}
		checks = append(checks, c)
	}
	return checks, nil
}
