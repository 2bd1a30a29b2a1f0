package upstashbox

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/crabbox-dev/crabbox/lease"
	"github.com/crabbox-dev/crabbox/provider"
	"github.com/crabbox-dev/crabbox/providers/internal/cloud"
)

// Labels and names of crabbox's boxes. Upstash allows maxLabels labels per
// box, each at most maxLabelLen characters of labelChars.
const (
	LabelCrabbox = "crabbox"
	namePrefix   = "crabbox-"
	maxLabels    = 5
	maxLabelLen  = 20
	// ownLabels is how many labels crabbox itself uses: LabelCrabbox and
	// the lease ID.
	ownLabels = 2
)

var labelChars = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[A-Za-z0-9._:-]+$`) })

// cleanupTimeout bounds the removal of a half-made box, and the kill of a
// command, after the caller has given up.
const cleanupTimeout = time.Minute

// readyTimeout bounds the wait for a box that is still being created.
const readyTimeout = 5 * time.Minute

// Box statuses after which nothing runs in the box.
var endedStatuses = []string{"error", "deleted"}

// Backend is the Upstash Box provider's delegated backend. It runs nothing
// in this process between calls, so it needs no Close.
type Backend struct {
	cfg Config
	rt  provider.Runtime
	api *api
}

// New returns a backend for cfg. It makes no API call.
func New(cfg Config, rt provider.Runtime) (*Backend, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	rt = rt.WithDefaults()
	return &Backend{cfg: cfg, rt: rt, api: newAPI(cfg, rt)}, nil
}

// Spec describes the Upstash Box provider.
func (b *Backend) Spec() provider.Spec { return Provider{}.Spec() }

// MaxLifetime is the longest TTL a box gets, as configured (at most
// Upstash's three days).
func (b *Backend) MaxLifetime() time.Duration { return b.cfg.MaxLifetime }

// BoxName is the name of the box of a lease: crabbox-<slug>-<12 hex of
// the lease ID>, or crabbox-<12 hex> without a slug.
func BoxName(leaseID, slug string) string {
	hex := strings.TrimPrefix(leaseID, "cbx_")
	if slug == "" {
		return namePrefix + hex
	}
	return namePrefix + slug + "-" + hex
}

// owner returns the lease ID and slug a box provably belongs to: its
// labels mark it as crabbox's and name exactly one lease ID, and its name
// is that lease's.
func owner(bx boxJSON) (id, slug string, ok bool) {
	if !slices.Contains(bx.Labels, LabelCrabbox) {
		return "", "", false
	}
	for _, l := range bx.Labels {
		if lease.IsID(l) {
			if id != "" {
				return "", "", false
			}
			id = l
		}
	}
	if id == "" {
		return "", "", false
	}
	hex := strings.TrimPrefix(id, "cbx_")
	switch {
	case bx.Name == namePrefix+hex:
		return id, "", true
	case strings.HasPrefix(bx.Name, namePrefix) && strings.HasSuffix(bx.Name, "-"+hex) && len(bx.Name) > len(namePrefix)+len(hex)+1:
		return id, strings.TrimSuffix(strings.TrimPrefix(bx.Name, namePrefix), "-"+hex), true
	}
	return "", "", false
}

func ended(status string) bool { return slices.Contains(endedStatuses, status) }

// boxLabels are the labels of a new lease's box: crabbox's two, then the
// caller's as key:value.
func boxLabels(req provider.WarmupRequest) ([]string, error) {
	out := []string{LabelCrabbox, req.LeaseID}
	keys := slices.Sorted(maps.Keys(req.Labels))
	if len(keys) > maxLabels-ownLabels {
		return nil, fmt.Errorf("%d labels (%s) do not fit: an Upstash box has at most %d labels and crabbox uses %d: %w",
			len(keys), strings.Join(keys, ", "), maxLabels, ownLabels, provider.ErrPrecondition)
	}
	for _, k := range keys {
		l := k + ":" + req.Labels[k]
		switch {
		case k == "" || strings.Contains(k, ":") || k == LabelCrabbox || cloud.IsOwnershipKey(k):
			return nil, fmt.Errorf("label key %q is empty, has a colon or is reserved for crabbox: %w", k, provider.ErrPrecondition)
		case len(l) > maxLabelLen || !labelChars().MatchString(l):
			return nil, fmt.Errorf("label %q does not fit Upstash's labels (at most %d characters of letters, digits, '.', '_', '-', ':'): %w",
				l, maxLabelLen, provider.ErrPrecondition)
		}
		out = append(out, l)
	}
	return out, nil
}

// callerLabels are the caller's labels of a box (its key:value labels).
func callerLabels(bx boxJSON) map[string]string {
	out := map[string]string{}
	for _, l := range bx.Labels {
		if k, v, ok := strings.Cut(l, ":"); ok && k != "" {
			out[k] = v
		}
	}
	return out
}

// unix reads an API time: Unix seconds (a value too large for seconds is
// taken as milliseconds).
func unix(v int64) time.Time {
	switch {
	case v <= 0:
		return time.Time{}
	case v > 1e11:
		return time.UnixMilli(v).UTC()
	}
	return time.Unix(v, 0).UTC()
}

func (b *Backend) view(bx boxJSON) provider.LeaseView {
	id, slug, _ := owner(bx)
	return provider.LeaseView{
		ID: id, Slug: slug, Provider: Name, CloudID: bx.ID, State: bx.Status,
		Labels: callerLabels(bx), CreatedAt: unix(bx.CreatedAt), ExpiresAt: unix(bx.ExpiresAt),
		WorkRoot: b.cfg.WorkRoot,
	}
}

// ttl is the TTL of a new lease's box: the lease's TTL (or, without one,
// until its expiry), at most the configured maximum lifetime, in whole
// seconds rounded up.
func (b *Backend) ttl(req provider.WarmupRequest) (time.Duration, error) {
	now := b.rt.Clock.Now()
	ttl := req.TTL
	if ttl <= 0 && !req.ExpiresAt.IsZero() {
		ttl = req.ExpiresAt.Sub(now)
	}
	if ttl <= 0 {
		return 0, fmt.Errorf("no TTL, or an expiry (%s) that is not after now (%s)", req.ExpiresAt.Format(time.RFC3339), now.Format(time.RFC3339))
	}
	if ttl > b.cfg.MaxLifetime {
		b.rt.Logger.Warn("upstash-box: lease TTL capped to the maximum lifetime", "lease", req.LeaseID, "ttl", ttl, "max", b.cfg.MaxLifetime)
		ttl = b.cfg.MaxLifetime
	}
	return (ttl + time.Second - 1).Truncate(time.Second), nil
}

// Warmup creates the lease's ephemeral box, labelled and named for the
// lease, which Upstash deletes when its TTL (the lease's TTL, at most the
// maximum lifetime) ends. If the create call fails in a way that may have
// left a box behind (a lost answer, a server error, ctx ending), or the
// box never becomes ready, it deletes the lease's boxes before returning.
func (b *Backend) Warmup(ctx context.Context, req provider.WarmupRequest) (provider.LeaseView, error) {
	if !lease.IsID(req.LeaseID) {
		return provider.LeaseView{}, fmt.Errorf("upstash-box: lease ID %q is not a crabbox lease ID", req.LeaseID)
	}
	labels, err := boxLabels(req)
	if err == nil && len(BoxName(req.LeaseID, req.Slug)) > 63 {
		err = fmt.Errorf("slug %q is too long for a box name", req.Slug)
	}
	var ttl time.Duration
	if err == nil {
		ttl, err = b.ttl(req)
	}
	if err != nil {
		return provider.LeaseView{}, fmt.Errorf("upstash-box: warm up %s: %w", req.LeaseID, err)
	}
	name := BoxName(req.LeaseID, req.Slug)
	got, err := b.api.createBox(ctx, createBoxBody{
		Name: name, Labels: labels, Runtime: b.cfg.Runtime, Size: b.cfg.Size, Ephemeral: true, TTL: int64(ttl / time.Second),
	})
	if err == nil {
		if id, _, ok := owner(got); !ok || id != req.LeaseID || got.ID == "" {
			err = fmt.Errorf("create box %s: the answer names box %q (%q) with labels %q", name, got.ID, got.Name, got.Labels)
		}
	}
	if err == nil && !ready(got.Status) {
		got, err = b.waitReady(ctx, got)
	}
	if err != nil {
		if !definite(err) || got.ID != "" {
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
			defer cancel()
			if rerr := b.remove(rctx, req.LeaseID); rerr != nil {
				err = errors.Join(err, fmt.Errorf("remove what the failed warmup left (cleanup will retry): %w", rerr))
			}
		}
		return provider.LeaseView{}, fmt.Errorf("upstash-box: warm up %s: %w", req.LeaseID, err)
	}
	b.rt.Logger.Info("upstash box created", "lease", req.LeaseID, "box", got.ID, "name", name, "ttl", ttl)
	return b.view(got), nil
}

// ready reports whether a box in status can run commands.
func ready(status string) bool {
	return status == "idle" || status == "running" || status == "paused" || status == "ready"
}

// waitReady polls a box that is being created until it is ready.
func (b *Backend) waitReady(ctx context.Context, bx boxJSON) (boxJSON, error) {
	wctx, cancel := context.WithTimeout(ctx, readyTimeout)
	defer cancel()
	backoff := cloud.NewBackoff(2 * time.Second)
	for {
		switch {
		case ready(bx.Status):
			return bx, nil
		case bx.Status != "creating":
			return bx, fmt.Errorf("box %s is %q, not ready", bx.ID, bx.Status)
		}
		select {
		case <-wctx.Done():
			return bx, fmt.Errorf("box %s still %q: %w", bx.ID, bx.Status, wctx.Err())
		case <-b.rt.Clock.After(backoff.Next()):
		}
		next, err := b.api.getBox(wctx, bx.ID)
		if err != nil {
			return bx, err
		}
		bx = next
	}
}

// boxes returns the boxes that provably belong to lease id, whatever
// their state.
func (b *Backend) boxes(ctx context.Context, id string) ([]boxJSON, error) {
	all, err := b.api.listBoxes(ctx, id)
	if err != nil {
		return nil, err
	}
	var out []boxJSON
	for _, bx := range all {
		if owner, _, ok := owner(bx); ok && owner == id {
			out = append(out, bx)
		}
	}
	return out, nil
}

// leaseID resolves id, a lease ID or a slug, to a lease ID.
func (b *Backend) leaseID(ctx context.Context, id string) (string, error) {
	if lease.IsID(id) {
		return id, nil
	}
	all, err := b.list(ctx)
	if err != nil {
		return "", err
	}
	var ids []string
	for _, bx := range all {
		if lid, slug, _ := owner(bx); slug == id && !slices.Contains(ids, lid) {
			ids = append(ids, lid)
		}
	}
	switch len(ids) {
	case 0:
		return "", fmt.Errorf("upstash-box: no box for lease %q: %w", id, provider.ErrNotFound)
	case 1:
		return ids[0], nil
	}
	return "", fmt.Errorf("upstash-box: slug %q names several leases (%s): %w", id, strings.Join(ids, ", "), provider.ErrConflict)
}

// live returns the box of a lease (by ID or slug) that has not ended.
func (b *Backend) live(ctx context.Context, id string) (boxJSON, error) {
	lid, err := b.leaseID(ctx, id)
	if err != nil {
		return boxJSON{}, err
	}
	all, err := b.boxes(ctx, lid)
	if err != nil {
		return boxJSON{}, fmt.Errorf("upstash-box: lease %s: %w", id, err)
	}
	var alive []boxJSON
	for _, bx := range all {
		if !ended(bx.Status) && (bx.ExpiresAt == 0 || b.rt.Clock.Now().Before(unix(bx.ExpiresAt))) {
			alive = append(alive, bx)
		}
	}
	switch len(alive) {
	case 0:
		return boxJSON{}, fmt.Errorf("upstash-box: no live box for lease %s: %w", id, provider.ErrNotFound)
	case 1:
		return alive[0], nil
	}
	return boxJSON{}, fmt.Errorf("upstash-box: lease %s has %d live boxes: %w", id, len(alive), provider.ErrConflict)
}

// list returns crabbox's boxes.
func (b *Backend) list(ctx context.Context) ([]boxJSON, error) {
	all, err := b.api.listBoxes(ctx, LabelCrabbox)
	if err != nil {
		return nil, fmt.Errorf("upstash-box: %w", err)
	}
	out := all[:0]
	for _, bx := range all {
		if _, _, ok := owner(bx); ok {
			out = append(out, bx)
		}
	}
	return out, nil
}

// Status returns a live lease by ID or slug; an ended one is not found.
func (b *Backend) Status(ctx context.Context, req provider.StatusRequest) (provider.LeaseView, error) {
	bx, err := b.live(ctx, req.ID)
	if err != nil {
		return provider.LeaseView{}, err
	}
	return b.view(bx), nil
}

// List returns crabbox's boxes that have not ended (ended ones are gone
// for Status too; Stop and Cleanup still find them).
func (b *Backend) List(ctx context.Context, _ provider.ListRequest) ([]provider.LeaseView, error) {
	all, err := b.list(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]provider.LeaseView, 0, len(all))
	for _, bx := range all {
		if !ended(bx.Status) {
			out = append(out, b.view(bx))
		}
	}
	return out, nil
}

// Stop deletes the lease's box; a lease that is already gone is stopped.
func (b *Backend) Stop(ctx context.Context, req provider.StopRequest) error {
	id, err := b.leaseID(ctx, req.ID)
	if errors.Is(err, provider.ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	if err := b.remove(ctx, id); err != nil {
		return fmt.Errorf("upstash-box: stop %s: %w", id, err)
	}
	return nil
}

// remove deletes every box that provably belongs to lease id; none is
// removed.
func (b *Backend) remove(ctx context.Context, id string) error {
	all, err := b.boxes(ctx, id)
	if err != nil {
		return err
	}
	var errs []error
	for _, bx := range all {
		errs = append(errs, b.delete(ctx, bx))
	}
	return errors.Join(errs...)
}

// delete deletes one box; a box already gone is deleted.
func (b *Backend) delete(ctx context.Context, bx boxJSON) error {
	if err := b.api.deleteBox(ctx, bx.ID); err != nil && !errors.Is(err, provider.ErrNotFound) {
		return err
	}
	id, _, _ := owner(bx)
	b.rt.Logger.Info("upstash box deleted", "lease", id, "box", bx.ID)
	return nil
}
