package linode

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/linode/linodego"

	"github.com/crabbox-dev/crabbox/provider"
	"github.com/crabbox-dev/crabbox/providers/internal/cloud"
	"github.com/crabbox-dev/crabbox/providers/internal/tagcloud"
)

// Backend is the Linode provider's SSH-lease backend.
type Backend struct {
	*tagcloud.Backend
	cfg    Config
	client *linodego.Client
}

// New returns a backend for cfg. It makes no API call.
func New(cfg Config, rt provider.Runtime) (*Backend, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	rt = rt.WithDefaults()
	hc := *rt.HTTPClient
	if hc.Transport == nil {
		hc.Transport = http.DefaultTransport
	}
	hc.Transport = errorShape{base: hc.Transport, token: cfg.Token}
	client := linodego.NewClient(&hc)
	client.SetToken(cfg.Token)
	client.SetUserAgent("crabbox " + linodego.DefaultUserAgent)
	client.UseCache(false)
	// Only the endpoint option moves the API, and nothing logs requests:
	// not linodego's own LINODE_URL, LINODE_API_VERSION or LINODE_DEBUG.
	client.SetDebug(false)
	client.SetLogger(sdkLogger{rt.Logger.With("sdk", "linodego")})
	client.SetAPIVersion(linodego.APIVersion)
	endpoint := cfg.Endpoint
	if endpoint == "" {
		endpoint = DefaultEndpoint
	}
	if _, err := client.UseURL(endpoint); err != nil {
		return nil, fmt.Errorf("linode provider: option endpoint: %w", err)
	}
	if cfg.NoRetries {
		client.SetRetryCount(0)
	}
	b := &Backend{cfg: cfg, client: &client}
	b.Backend = tagcloud.New(tagcloud.Config{
		Options: cfg.Options, Provider: Name, Codec: cloud.TagCodec{MaxLen: MaxTagLength},
		Ports: cfg.Ports, PollInterval: cfg.PollInterval, MapAddress: cfg.MapAddress, CallTimeout: cfg.CallTimeout,
	}, instances{&client}, rt)
	return b, nil
}

// Spec describes the Linode provider.
func (b *Backend) Spec() provider.Spec { return Provider{}.Spec() }

// instances maps linodego onto the tag cloud API.
type instances struct{ c *linodego.Client }

func (l instances) Create(ctx context.Context, s tagcloud.Spec) (tagcloud.Machine, error) {
	in, err := l.c.CreateInstance(ctx, linodego.InstanceCreateOptions{
		Region: s.Region, Type: s.Size, Label: s.Name, Image: s.Image, Tags: s.Tags,
		AuthorizedKeys: []string{strings.TrimSpace(s.AuthorizedKey)}, Booted: linodego.Pointer(true),
		Metadata: &linodego.InstanceMetadataOptions{UserData: base64.StdEncoding.EncodeToString([]byte(s.UserData))},
	})
	if err != nil {
		return tagcloud.Machine{}, apiError(ctx, "create instance", err)
	}
	return machine(in), nil
}

func (l instances) Get(ctx context.Context, id string) (tagcloud.Machine, error) {
	n, err := instanceID(id)
	if err != nil {
		return tagcloud.Machine{}, err
	}
	in, err := l.c.GetInstance(ctx, n)
	if err != nil {
		return tagcloud.Machine{}, apiError(ctx, "read instance "+id, err)
	}
	return machine(in), nil
}

func (l instances) List(ctx context.Context, tag string) ([]tagcloud.Machine, error) {
	filter, err := json.Marshal(map[string]string{"tags": tag})
	if err != nil {
		return nil, err
	}
	all, err := l.c.ListInstances(ctx, linodego.NewListOptions(0, string(filter)))
	if err != nil {
		return nil, apiError(ctx, "list instances tagged "+tag, err)
	}
	out := make([]tagcloud.Machine, 0, len(all))
	for i := range all {
		out = append(out, machine(&all[i]))
	}
	return out, nil
}

func (l instances) SetTags(ctx context.Context, m tagcloud.Machine, tags []string) (tagcloud.Machine, error) {
	n, err := instanceID(m.ID)
	if err != nil {
		return tagcloud.Machine{}, err
	}
	in, err := l.c.UpdateInstance(ctx, n, linodego.InstanceUpdateOptions{Tags: &tags})
	if err != nil {
		return tagcloud.Machine{}, apiError(ctx, "tag instance "+m.ID, err)
	}
	return machine(in), nil
}

func (l instances) Delete(ctx context.Context, id string) error {
	n, err := instanceID(id)
	if err != nil {
		return err
	}
	if err := l.c.DeleteInstance(ctx, n); err != nil && !linodego.IsNotFound(err) {
		return apiError(ctx, "delete instance "+id, err)
	}
	return nil
}

func instanceID(id string) (int, error) {
	n, err := strconv.Atoi(id)
	if err != nil || n < 1 {
		return 0, fmt.Errorf("instance ID %q is not a positive number: %w", id, provider.ErrNotFound)
	}
	return n, nil
}

// machine is the tag cloud's view of an instance.
func machine(in *linodego.Instance) tagcloud.Machine {
	m := tagcloud.Machine{ID: strconv.Itoa(in.ID), Tags: in.Tags, Running: in.Status == linodego.InstanceRunning, Status: string(in.Status)}
	for _, ip := range in.IPv4 {
		if ip != nil && ip.To4() != nil && !ip.IsPrivate() && !ip.IsUnspecified() {
			m.IPv4 = ip.String()
			break
		}
	}
	return m
}

// apiError names the operation and classifies a linodego error as one of
// the provider's portable errors, keeping the SDK error reachable. The
// SDK turns a transport failure into an error of its own, so a request
// ended by ctx is reported with ctx's error. Linode reports no capacity as
// 400 with a reason that the type is not available or sold out in the
// region, and a full account as a limit.
func apiError(ctx context.Context, op string, err error) error {
	if ctx.Err() != nil {
		return fmt.Errorf("%s: %w", op, context.Cause(ctx))
	}
	code := 0
	var e *linodego.Error
	var v linodego.Error
	switch {
	case errors.As(err, &e):
		code = e.Code
	case errors.As(err, &v):
		code = v.Code
	}
	msg := strings.ToLower(err.Error())
	capacity := strings.Contains(msg, "not available") || strings.Contains(msg, "unavailable") ||
		strings.Contains(msg, "sold out") || strings.Contains(msg, "capacity") || strings.Contains(msg, "limit")
	var kind error
	switch {
	case (code == http.StatusBadRequest || code == http.StatusForbidden) && capacity:
		kind = provider.ErrCapacity
	case code == http.StatusUnauthorized || code == http.StatusForbidden:
		kind = provider.ErrUnauthenticated
	case code == http.StatusNotFound:
		kind = provider.ErrNotFound
	case code == http.StatusConflict:
		kind = provider.ErrConflict
	case code >= 400 && code < 500 && code != http.StatusTooManyRequests && code != http.StatusRequestTimeout:
		kind = provider.ErrPrecondition
	default:
		kind = provider.ErrTransient
	}
	return fmt.Errorf("%s: %w: %w", op, kind, err)
}
