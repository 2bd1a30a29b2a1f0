package digitalocean

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/digitalocean/godo"

	"github.com/crabbox-dev/crabbox/provider"
	"github.com/crabbox-dev/crabbox/providers/internal/cloud"
	"github.com/crabbox-dev/crabbox/providers/internal/tagcloud"
)

// Backend is the DigitalOcean provider's SSH-lease backend.
type Backend struct {
	*tagcloud.Backend
	cfg    Config
	rt     provider.Runtime
	client *godo.Client
	codec  cloud.TagCodec
}

// New returns a backend for cfg. It makes no API call.
func New(cfg Config, rt provider.Runtime) (*Backend, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	rt = rt.WithDefaults()
	opts := []godo.ClientOpt{
		godo.SetUserAgent("crabbox"),
		godo.SetRequestHeaders(map[string]string{"Authorization": "Bearer " + cfg.Token}),
	}
	if cfg.Endpoint != "" {
		base := cfg.Endpoint
		if !strings.HasSuffix(base, "/") {
			base += "/"
		}
		opts = append(opts, godo.SetBaseURL(base))
	}
	client, err := godo.New(rt.HTTPClient, opts...)
	if err != nil {
		return nil, fmt.Errorf("digitalocean provider: %w", err)
	}
	b := &Backend{cfg: cfg, rt: rt, client: client, codec: cloud.TagCodec{MaxLen: MaxTagLength}}
	b.Backend = tagcloud.New(tagcloud.Config{
		Options: cfg.Options, Provider: Name, Codec: b.codec,
		Ports: cfg.Ports, PollInterval: cfg.PollInterval, MapAddress: cfg.MapAddress, CallTimeout: cfg.CallTimeout,
	}, droplets{client}, rt)
	return b, nil
}

// Spec describes the DigitalOcean provider.
func (b *Backend) Spec() provider.Spec { return Provider{}.Spec() }

// droplets maps godo onto the tag cloud API.
type droplets struct{ c *godo.Client }

// Create creates the droplet from the image slug s.Image or, when that is
// a number, from the snapshot with that ID (a fork).
func (d droplets) Create(ctx context.Context, s tagcloud.Spec) (tagcloud.Machine, error) {
	image := godo.DropletCreateImage{Slug: s.Image}
	if id, err := strconv.Atoi(s.Image); err == nil {
		image = godo.DropletCreateImage{ID: id}
	}
	drop, _, err := d.c.Droplets.Create(ctx, &godo.DropletCreateRequest{
		Name: s.Name, Region: s.Region, Size: s.Size, Image: image,
		UserData: s.UserData, Tags: s.Tags, IPv6: true, SSHKeys: []godo.DropletCreateSSHKey{},
	})
	if err != nil {
		return tagcloud.Machine{}, apiError("create droplet", err)
	}
	if drop == nil {
		return tagcloud.Machine{}, errors.New("create droplet: the API returned no droplet")
	}
	return machine(drop), nil
}

func (d droplets) Get(ctx context.Context, id string) (tagcloud.Machine, error) {
	n, err := dropletID(id)
	if err != nil {
		return tagcloud.Machine{}, err
	}
	drop, _, err := d.c.Droplets.Get(ctx, n)
	if err != nil {
		return tagcloud.Machine{}, apiError("read droplet "+id, err)
	}
	return machine(drop), nil
}

func (d droplets) List(ctx context.Context, tag string) ([]tagcloud.Machine, error) {
	var out []tagcloud.Machine
	opt := &godo.ListOptions{Page: 1, PerPage: 200}
	for {
		page, resp, err := d.c.Droplets.ListByTag(ctx, tag, opt)
		if err != nil {
			return nil, apiError("list droplets tagged "+tag, err)
		}
		for i := range page {
			out = append(out, machine(&page[i]))
		}
		if resp == nil || resp.Links == nil || resp.Links.IsLastPage() || len(page) == 0 {
			return out, nil
		}
		opt.Page++
	}
}

// SetTags tags the droplet with the tags it lacks (creating each tag
// first, as the API wants) and untags those it no longer has.
func (d droplets) SetTags(ctx context.Context, m tagcloud.Machine, tags []string) (tagcloud.Machine, error) {
	res := []godo.Resource{{ID: m.ID, Type: godo.DropletResourceType}}
	for _, t := range tags {
		if slices.Contains(m.Tags, t) {
			continue
		}
		if _, _, err := d.c.Tags.Create(ctx, &godo.TagCreateRequest{Name: t}); err != nil {
			return tagcloud.Machine{}, apiError("create tag "+t, err)
		}
		if _, err := d.c.Tags.TagResources(ctx, t, &godo.TagResourcesRequest{Resources: res}); err != nil {
			return tagcloud.Machine{}, apiError("tag droplet "+m.ID, err)
		}
	}
	for _, t := range m.Tags {
		if slices.Contains(tags, t) {
			continue
		}
		if _, err := d.c.Tags.UntagResources(ctx, t, &godo.UntagResourcesRequest{Resources: res}); err != nil && !isNotFound(err) {
			return tagcloud.Machine{}, apiError("untag droplet "+m.ID, err)
		}
		d.dropIfUnused(ctx, t)
	}
	return d.Get(ctx, m.ID)
}

// dropIfUnused deletes a tag that recorded a time (a touch's
// last_touched_at and expires_at), once nothing carries it, so that
// touches do not pile up tags in the account. Shared tags (state:ready,
// provider:digitalocean) are left: another lease may take them any time.
func (d droplets) dropIfUnused(ctx context.Context, tag string) {
	if !strings.HasPrefix(tag, cloud.LabelLastTouchedAt+":") && !strings.HasPrefix(tag, cloud.LabelExpiresAt+":") {
		return
	}
	t, _, err := d.c.Tags.Get(ctx, tag)
	if err != nil || t == nil || t.Resources == nil || t.Resources.Count != 0 {
		return
	}
	_, _ = d.c.Tags.Delete(ctx, tag) // an unused tag left behind costs nothing
}

func (d droplets) Delete(ctx context.Context, id string) error {
	n, err := dropletID(id)
	if err != nil {
		return err
	}
	if _, err := d.c.Droplets.Delete(ctx, n); err != nil && !isNotFound(err) {
		return apiError("delete droplet "+id, err)
	}
	return nil
}

func dropletID(id string) (int, error) {
	n, err := strconv.Atoi(id)
	if err != nil || n < 1 {
		return 0, fmt.Errorf("droplet ID %q is not a positive number: %w", id, provider.ErrNotFound)
	}
	return n, nil
}

// machine is the tag cloud's view of a droplet.
func machine(d *godo.Droplet) tagcloud.Machine {
	ip, _ := d.PublicIPv4()
	return tagcloud.Machine{ID: strconv.Itoa(d.ID), Tags: d.Tags, Running: d.Status == "active", Status: d.Status, IPv4: ip}
}

func isNotFound(err error) bool {
	var e *godo.ErrorResponse
	return errors.As(err, &e) && e.Response != nil && e.Response.StatusCode == http.StatusNotFound
}

// apiError names the operation and classifies a godo error as one of the
// provider's portable errors, keeping the SDK error reachable.
// DigitalOcean reports no capacity as 422 ("size is not available in
// this region", "... unavailable") and a full account as 403 or 422 with
// a message about its Droplet limit.
func apiError(op string, err error) error {
	var e *godo.ErrorResponse
	if !errors.As(err, &e) || e.Response == nil {
		if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
			return fmt.Errorf("%s: %w", op, err)
		}
		return fmt.Errorf("%s: %w: %w", op, provider.ErrTransient, err)
	}
	msg := strings.ToLower(e.Message)
	capacity := strings.Contains(msg, "not available") || strings.Contains(msg, "unavailable") ||
		strings.Contains(msg, "capacity") || strings.Contains(msg, "limit")
	var kind error
	switch code := e.Response.StatusCode; {
	case (code == http.StatusUnprocessableEntity || code == http.StatusForbidden) && capacity:
		kind = provider.ErrCapacity
	case code == http.StatusUnauthorized || code == http.StatusForbidden:
		kind = provider.ErrUnauthenticated
	case code == http.StatusNotFound:
		kind = provider.ErrNotFound
	case code == http.StatusConflict || code == http.StatusLocked:
		kind = provider.ErrConflict
	case code == http.StatusTooManyRequests || code >= 500:
		kind = provider.ErrTransient
	default:
		kind = provider.ErrPrecondition
	}
	return fmt.Errorf("%s: %w: %w", op, kind, err)
}
