package docker

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/crabbox-dev/crabbox/lease"
	"github.com/crabbox-dev/crabbox/provider"
	eng "github.com/crabbox-dev/crabbox/providers/docker/internal/engine"
	"github.com/crabbox-dev/crabbox/providers/local"
)

// Backend is the docker provider's SSH-lease backend. Close it to close its
// connections to the engine; boxes live on.
type Backend struct {
	cfg Config
	rt  provider.Runtime
	cli *eng.Client

	// afterCreate, when set (by tests), runs right after Acquire created
	// the container; an error fails the acquire there.
	afterCreate func(ctx context.Context, containerID string) error

	// copyLease, when set (by tests), treats every agent as one that
	// cannot read its lease directory on stdin (the CLI as agent), so the
	// lease is copied into the container before it starts.
	copyLease bool

	// lookPath finds programs on PATH (the Go toolchain, to build an
	// agent); agentCache, when set, is where built agents are kept
	// instead of the user's cache directory. Tests change both.
	lookPath   func(string) (string, error)
	agentCache string

	// records is what the backend last knew of each box's lease record
	// (see recordcache.go).
	recordsMu sync.Mutex
	records   map[string]cachedRecord
}

// New returns a backend for the engine at cfg.Host (or DOCKER_HOST, or the
// default socket). It does not contact the engine.
func New(cfg Config, rt provider.Runtime) (*Backend, error) {
	if cfg.Image == "" {
		cfg.Image = DefaultImage
	}
	if cfg.DesktopImage == "" {
		cfg.DesktopImage = DefaultDesktopImage
	}
	if err := cfg.check(); err != nil {
		return nil, err
	}
	ecfg := eng.ConfigFromEnv(os.Getenv)
	if cfg.Host != "" {
		ecfg.Host = cfg.Host
	}
	cli, err := eng.New(ecfg)
	if err != nil {
		return nil, fmt.Errorf("docker provider: engine client: %w", err)
	}
	if err := checkLocalHost(cli.Host()); err != nil {
		_ = cli.Close()
		return nil, fmt.Errorf("docker provider: engine: %w", err)
	}
	return &Backend{cfg: cfg, rt: rt.WithDefaults(), cli: cli, lookPath: exec.LookPath}, nil
}

// Spec describes the docker provider.
func (b *Backend) Spec() provider.Spec { return Provider{}.Spec() }

// Close closes the backend's connections to the engine.
func (b *Backend) Close() error { return b.cli.Close() }

// containerName is the name of a lease's container.
func containerName(slug, id string) string {
	if slug == "" {
		return "crabbox-" + id
	}
	return "crabbox-" + slug + "-" + id
}

// box is what the engine knows about one crabbox container.
type box struct {
	containerID string
	name        string
	state       string // eng.StateRunning, ...
	labels      map[string]string
	port        int // host port on 127.0.0.1 of the SSH port; 0 if not published
}

func (x box) leaseID() string { return x.labels[labelLease] }

// running reports whether the box can serve.
func (x box) running() bool { return x.state == eng.StateRunning }

// boxes lists the provider's containers, filtered by extra label terms
// ("key=value").
func (b *Backend) boxes(ctx context.Context, terms ...string) ([]box, error) {
	labels := append([]string{labelCrabbox + "=true", labelProvider + "=" + Name}, terms...)
	items, err := b.cli.ContainerList(ctx, eng.ListOptions{All: true, Labels: labels})
	if err != nil {
		return nil, engineErr(err)
	}
	var out []box
	for _, s := range items {
		if !owned(s.Labels) {
			continue
		}
		x := box{containerID: s.ID, state: s.State, labels: s.Labels}
		if len(s.Names) > 0 {
			x.name = strings.TrimPrefix(s.Names[0], "/")
		}
		for _, p := range s.Ports {
			if int(p.PrivatePort) == sshPort && p.Type == "tcp" && p.IP == "127.0.0.1" {
				x.port = int(p.PublicPort)
			}
		}
		out = append(out, x)
	}
	slices.SortFunc(out, func(a, c box) int { return strings.Compare(a.leaseID(), c.leaseID()) })
	return out, nil
}

// find returns the box of lease ref, an ID or a slug, running or not.
func (b *Backend) find(ctx context.Context, ref string) (box, error) {
	key := labelSlug
	if lease.IsID(ref) {
		key = labelLease
	}
	found, err := b.boxes(ctx, key+"="+ref)
	if err != nil {
		return box{}, err
	}
	switch len(found) {
	case 0:
		return box{}, fmt.Errorf("docker lease %q: no container: %w", ref, provider.ErrNotFound)
	case 1:
		return found[0], nil
	}
	ids := make([]string, len(found))
	for i, x := range found {
		ids[i] = x.leaseID()
	}
	return box{}, fmt.Errorf("docker lease %q is ambiguous: leases %s: %w", ref, strings.Join(ids, ", "), provider.ErrConflict)
}

// target describes x for the library. The expiry comes from the lease
// record inside a running box (Touch moves it there), as last written or
// read by this client when it has (with the host key from the box's
// label), else read out of the box; from the label when it is not running.
func (b *Backend) target(ctx context.Context, x box) provider.LeaseTarget {
	if !x.running() {
		return describe(x, nil)
	}
	if c, ok := b.cachedRecordOf(x); ok && x.labels[labelHostKey] != "" {
		return describe(x, &local.AgentLease{ExpiresAt: c.ExpiresAt, HostKey: x.labels[labelHostKey]})
	}
	rec, err := b.record(ctx, x)
	if err != nil {
		b.rt.Logger.Debug("docker lease record unreadable; using labels", "lease", x.leaseID(), "err", err)
		return describe(x, nil)
	}
	return describe(x, &rec)
}

// describe describes x for the library, with the expiry and host key of
// its lease record rec when there is one, else those of its labels.
func describe(x box, rec *local.AgentLease) provider.LeaseTarget {
	t := provider.LeaseTarget{
		LeaseID:   x.leaseID(),
		Slug:      x.labels[labelSlug],
		Provider:  Name,
		CloudID:   x.name,
		Host:      "127.0.0.1",
		Port:      x.port,
		User:      boxUser,
		WorkRoot:  workRoot,
		State:     string(x.state),
		Labels:    userLabels(x.labels),
		CreatedAt: unixLabel(x.labels, labelCreatedAt),
		ExpiresAt: unixLabel(x.labels, labelExpiresAt),
	}
	if x.running() {
		t.State = "ready"
	}
	if rec != nil {
		t.ExpiresAt, t.HostKey = rec.ExpiresAt, rec.HostKey
	}
	return t
}

// record reads the lease record of a running box.
func (b *Backend) record(ctx context.Context, x box) (local.AgentLease, error) {
	data, err := b.readFile(ctx, x.containerID, boxRecordPath(x.leaseID()), maxRecordSize)
	if err != nil {
		return local.AgentLease{}, err
	}
	rec, err := local.DecodeRecord(data)
	if err != nil {
		return local.AgentLease{}, err
	}
	if rec.ID != x.leaseID() {
		return local.AgentLease{}, fmt.Errorf("container %s holds the record of lease %q", x.name, rec.ID)
	}
	b.cacheRecord(x, rec.ExpiresAt, data)
	return rec, nil
}

// Resolve finds the running box of a lease by ID or slug.
func (b *Backend) Resolve(ctx context.Context, req provider.ResolveRequest) (provider.LeaseTarget, error) {
	x, err := b.find(ctx, req.ID)
	if err != nil {
		return provider.LeaseTarget{}, err
	}
	if !x.running() || x.port == 0 {
		return provider.LeaseTarget{}, fmt.Errorf("docker lease %q: container %s is %s, not serving: %w", req.ID, x.name, x.state, provider.ErrNotFound)
	}
	return b.target(ctx, x), nil
}

// List returns every crabbox container of the engine, running or not.
func (b *Backend) List(ctx context.Context, _ provider.ListRequest) ([]provider.LeaseTarget, error) {
	found, err := b.boxes(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]provider.LeaseTarget, 0, len(found))
	for _, x := range found {
		out = append(out, b.target(ctx, x))
	}
	return out, nil
}

// Touch moves the lease's expiry to req.ExpiresAt by rewriting the lease
// record in the box, which the agent re-reads when its old expiry passes.
func (b *Backend) Touch(ctx context.Context, req provider.TouchRequest) (provider.LeaseTarget, error) {
	x, err := b.find(ctx, req.Lease.LeaseID)
	if err != nil {
		return provider.LeaseTarget{}, fmt.Errorf("touch: %w", err)
	}
	if !x.running() {
		return provider.LeaseTarget{}, fmt.Errorf("touch docker lease %s: container %s is %s: %w", x.leaseID(), x.name, x.state, provider.ErrNotFound)
	}
	name := boxRecordPath(x.leaseID())
	var data []byte
	if c, ok := b.cachedRecordOf(x); ok {
		data = c.Record
	}
	if data == nil {
		if data, err = b.readFile(ctx, x.containerID, name, maxRecordSize); err != nil {
			return provider.LeaseTarget{}, engineErr(fmt.Errorf("touch docker lease %s: read lease record: %w", x.leaseID(), err))
		}
	}
	data, err = local.SetRecordExpiry(data, req.ExpiresAt.UTC())
	if err != nil {
		return provider.LeaseTarget{}, fmt.Errorf("touch docker lease %s: %w", x.leaseID(), err)
	}
	rec, err := local.DecodeRecord(data)
	if err != nil {
		return provider.LeaseTarget{}, fmt.Errorf("touch docker lease %s: %w", x.leaseID(), err)
	}
	if rec.ID != x.leaseID() {
		return provider.LeaseTarget{}, fmt.Errorf("touch docker lease %s: container %s holds the record of lease %q", x.leaseID(), x.name, rec.ID)
	}
	if err := b.writeFile(ctx, x.containerID, name, data); err != nil {
		b.forgetRecord(x.leaseID())
		return provider.LeaseTarget{}, engineErr(fmt.Errorf("touch docker lease %s: write lease record: %w", x.leaseID(), err))
	}
	b.cacheRecord(x, rec.ExpiresAt, data)
	// The box is described by the record just written: reading it back
	// would cost another copy out of the container.
	return describe(x, &rec), nil
}

// ReleaseLease stops and removes the lease's container. A lease whose
// container is already gone is released. The image of a deleted
// checkpoint the container was started from goes with it, if no other
// box uses it.
func (b *Backend) ReleaseLease(ctx context.Context, req provider.ReleaseRequest) error {
	id := req.Lease.LeaseID
	if !lease.IsID(id) {
		return fmt.Errorf("release docker lease: lease ID %q is malformed", id)
	}
	found, err := b.boxes(ctx, labelLease+"="+id)
	if err != nil {
		return fmt.Errorf("release docker lease %s: %w", id, err)
	}
	var errs []error
	fromCheckpoint := false
	for _, x := range found {
		errs = append(errs, b.remove(ctx, x.containerID))
		fromCheckpoint = fromCheckpoint || x.labels[labelCheckpoint] != ""
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("release docker lease %s: %w", id, err)
	}
	if fromCheckpoint {
		// The image of a deleted checkpoint goes with its last box.
		b.sweepCheckpoints(ctx)
	}
	b.forgetRecord(id)
	b.rt.Logger.Info("docker lease released", "lease", id)
	return nil
}

// removeTimeout bounds waiting for a removal the engine already started.
const removeTimeout = 30 * time.Second

// remove force-removes a container (SIGKILL, then delete). A container
// that is already gone is fine; one the engine is already removing (its
// AutoRemove) is waited for.
func (b *Backend) remove(ctx context.Context, containerID string) error {
	err := b.cli.ContainerRemove(ctx, containerID, eng.RemoveOptions{Force: true, Volumes: true})
	switch {
	case err == nil, eng.IsNotFound(err):
		return nil
	case eng.IsConflict(err):
		ctx, cancel := context.WithTimeout(ctx, removeTimeout)
		defer cancel()
		_, werr := b.cli.ContainerWait(ctx, containerID, eng.WaitRemoved)
		if werr == nil || eng.IsNotFound(werr) {
			return nil
		}
		return engineErr(errors.Join(err, werr))
	default:
		return engineErr(err)
	}
}

// engineErr marks an engine error, which names what was asked, with the
// portable kind it matches.
func engineErr(err error) error {
	var kind error
	switch {
	case eng.IsNotFound(err):
		kind = provider.ErrNotFound
	case eng.IsConflict(err):
		kind = provider.ErrConflict
	case eng.IsDenied(err):
		kind = provider.ErrUnauthenticated
	case eng.IsUnavailable(err):
		kind = provider.ErrTransient
	case eng.IsExhausted(err):
		kind = provider.ErrCapacity
	}
	if kind == nil {
		return err
	}
	return fmt.Errorf("%w (%w)", err, kind)
}

// sshPortKey is the engine's name of the SSH port.
var sshPortKey = strconv.Itoa(sshPort) + "/tcp"

// portBindings publishes the SSH port on 127.0.0.1 with a port the engine
// chooses.
func portBindings() (map[string]struct{}, map[string][]eng.PortBinding) {
	return map[string]struct{}{sshPortKey: {}}, map[string][]eng.PortBinding{sshPortKey: {{HostIP: "127.0.0.1"}}}
}

// Image is the box image the backend creates containers from.
func (b *Backend) Image() string { return b.cfg.Image }

// DesktopImage is the configured box image of desktop leases.
func (b *Backend) DesktopImage() string { return b.cfg.DesktopImage }
