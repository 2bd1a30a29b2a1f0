package proxmox

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/luthermonson/go-proxmox"

	"github.com/crabbox-dev/crabbox/provider"
	"github.com/crabbox-dev/crabbox/providers/internal/cloud"
	"github.com/crabbox-dev/crabbox/providers/internal/tagcloud"
)

// Backend is the Proxmox VE provider's SSH-lease backend.
type Backend struct {
	*tagcloud.Backend
	cfg Config
	vms *vms
}

// New returns a backend for cfg. It makes no API call.
func New(cfg Config, rt provider.Runtime) (*Backend, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	rt = rt.WithDefaults()
	hc := *rt.HTTPClient
	if cfg.CAFile != "" {
		if hc.Transport, err = withCAFile(hc.Transport, cfg.CAFile); err != nil {
			return nil, fmt.Errorf("%s provider: option ca-file: %w", Name, err)
		}
	}
	base, err := apiBase(cfg.Endpoint)
	if err != nil {
		return nil, fmt.Errorf("%s provider: option endpoint: %w", Name, err)
	}
	id, secret, err := splitToken(cfg.Token)
	if err != nil {
		return nil, fmt.Errorf("%s provider: %w", Name, err)
	}
	opts := []proxmox.Option{
		proxmox.WithHTTPClient(&hc), proxmox.WithAPIToken(id, secret), proxmox.WithUserAgent("crabbox"),
		proxmox.WithLogger(sdkLogger{rt.Logger.With("sdk", "go-proxmox")}),
	}
	if !cfg.NoRetries {
		// Network errors and 429, 502, 503, 504, up to three attempts. A
		// 500 is Proxmox's answer to a request it refused (a VM that does
		// not exist, a lock), not a passing fault: it is not retried.
		opts = append(opts, proxmox.WithRetry())
	}
	poll := cfg.PollInterval
	if poll <= 0 {
		poll = 2 * time.Second
	}
	callTimeout := cfg.CallTimeout
	if callTimeout <= 0 {
		callTimeout = cfg.BootTimeout
	}
	v := &vms{c: proxmox.NewClient(base, opts...), clock: rt.Clock, poll: poll, log: rt.Logger}
	b := &Backend{cfg: cfg, vms: v}
	b.Backend = tagcloud.New(tagcloud.Config{
		Options: cfg.Options, Provider: Name, Codec: cloud.TagCodec{MaxLen: MaxTagLength},
		Ports: cfg.Ports, PollInterval: poll, MapAddress: cfg.MapAddress, CallTimeout: callTimeout,
	}, v, rt)
	return b, nil
}

// Spec describes the Proxmox VE provider.
func (b *Backend) Spec() provider.Spec { return Provider{}.Spec() }

// apiBase is the go-proxmox base URL of endpoint: the URL with the API's
// path, /api2/json, unless it ends with it already.
func apiBase(endpoint string) (string, error) {
	if err := cloud.CheckEndpoint(endpoint); err != nil {
		return "", err
	}
	u, err := url.Parse(endpoint)
	if err != nil {
		return "", err
	}
	u.Path = strings.TrimRight(u.Path, "/")
	if !strings.HasSuffix(u.Path, "/api2/json") {
		u.Path += "/api2/json"
	}
	return u.String(), nil
}

// withCAFile returns base (an *http.Transport, or the default one when
// nil) trusting the CAs of the PEM file path too.
func withCAFile(base http.RoundTripper, path string) (http.RoundTripper, error) {
	pem, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	pool, err := x509.SystemCertPool()
	if err != nil {
		pool = x509.NewCertPool()
	}
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("%s holds no PEM certificate", path)
	}
	if base == nil {
		base = http.DefaultTransport
	}
	t, ok := base.(*http.Transport)
	if !ok {
		return nil, fmt.Errorf("the HTTP client's transport is a %T, not an *http.Transport whose CAs could be set", base)
	}
	t = t.Clone()
	if t.TLSClientConfig == nil {
		t.TLSClientConfig = &tls.Config{MinVersion: tls.VersionTLS12}
	}
	t.TLSClientConfig.RootCAs = pool
	return t, nil
}

// vms maps the Proxmox VE API onto the tag cloud API. A machine's ID is
// "node/vmid".
type vms struct {
	c     *proxmox.Client
	clock clockwork.Clock
	poll  time.Duration
	log   *slog.Logger
}

// tagPattern is what Proxmox VE takes as a tag (pve-common's format
// pve-tag: a letter, digit or '_', then letters, digits and _-+.).
var tagPattern = regexp.MustCompile(`^[a-zA-Z0-9_][a-zA-Z0-9_\-+.]*$`)

// pveTags writes the tag cloud's tags ("key:value", "key:1:part") as
// Proxmox tags ("key.value", "key.1.part"): a ':' is no tag character,
// and the codec writes no '.' of its own.
func pveTags(tags []string) (string, error) {
	out := make([]string, 0, len(tags))
	for _, t := range tags {
		p := strings.ReplaceAll(t, ":", ".")
		if !tagPattern.MatchString(p) {
			return "", fmt.Errorf("label tag %q is not a Proxmox tag (letters, digits and _-+.): %w", t, provider.ErrPrecondition)
		}
		out = append(out, p)
	}
	return strings.Join(out, ";"), nil
}

// crabboxTags reads a VM's tags (separated by ';', ',' or spaces, as
// Proxmox's pve-tag-list allows) back as the tag cloud's tags.
func crabboxTags(s string) []string {
	fields := strings.FieldsFunc(s, func(r rune) bool { return r == ';' || r == ',' || r == ' ' })
	out := make([]string, 0, len(fields))
	for _, f := range fields {
		out = append(out, strings.ReplaceAll(f, ".", ":"))
	}
	return out
}

var sizePattern = regexp.MustCompile(`^([1-9][0-9]{0,3})c([1-9][0-9]{0,4})g$`)

// parseSize reads a size "<cores>c<GiB>g".
func parseSize(s string) (cores, memGiB int, err error) {
	m := sizePattern.FindStringSubmatch(s)
	if m == nil {
		return 0, 0, fmt.Errorf("%q: want cores and GiB of memory, like 2c4g", s)
	}
	cores, _ = strconv.Atoi(m[1])
	memGiB, _ = strconv.Atoi(m[2])
	return cores, memGiB, nil
}

// vmID reads a VM ID (Proxmox's are 100 to 999999999).
func vmID(s string) (int, error) {
	n, err := strconv.Atoi(s)
	if err != nil || n < 100 || n > 999999999 {
		return 0, fmt.Errorf("VM ID %q is not a number from 100 to 999999999", s)
	}
	return n, nil
}

func machineID(node string, vmid int) string { return node + "/" + strconv.Itoa(vmid) }

// parseID reads a machine ID "node/vmid".
func parseID(id string) (node string, vmid int, err error) {
	node, n, ok := strings.Cut(id, "/")
	if ok && node != "" {
		if vmid, err = vmID(n); err == nil {
			return node, vmid, nil
		}
	}
	return "", 0, fmt.Errorf("machine ID %q is not node/vmid: %w", id, provider.ErrNotFound)
}

func vmPath(node string, vmid int) string {
	return "/nodes/" + url.PathEscape(node) + "/qemu/" + strconv.Itoa(vmid)
}

// resource is a VM as /cluster/resources lists it.
type resource struct {
	VMID     int    `json:"vmid"`
	Node     string `json:"node"`
	Name     string `json:"name"`
	Status   string `json:"status"`
	Tags     string `json:"tags"`
	Template flag   `json:"template"`
	Type     string `json:"type"`
}

// flag is a Proxmox boolean, which the API writes as 0/1 (or true/false).
type flag bool

func (f *flag) UnmarshalJSON(b []byte) error {
	switch strings.Trim(string(b), `"`) {
	case "1", "true":
		*f = true
	default:
		*f = false
	}
	return nil
}

// resources lists the cluster's VMs.
func (v *vms) resources(ctx context.Context) ([]resource, error) {
	var rs []resource
	if err := v.c.Get(ctx, "/cluster/resources?type=vm", &rs); err != nil {
		return nil, apiError(ctx, "list the cluster's VMs", err)
	}
	return slices.DeleteFunc(rs, func(r resource) bool { return r.Type != "" && r.Type != "qemu" }), nil
}

func (v *vms) Create(ctx context.Context, s tagcloud.Spec) (tagcloud.Machine, error) {
	cores, memGiB, err := parseSize(s.Size)
	if err != nil {
		return tagcloud.Machine{}, fmt.Errorf("size %w: %w", err, provider.ErrPrecondition)
	}
	tmpl, err := vmID(s.Image)
	if err != nil {
		return tagcloud.Machine{}, fmt.Errorf("template %w: %w", err, provider.ErrPrecondition)
	}
	tags, err := pveTags(s.Tags)
	if err != nil {
		return tagcloud.Machine{}, err
	}
	if len(s.UserData) > maxInputData {
		return tagcloud.Machine{}, fmt.Errorf("the bootstrap script is %d bytes, more than the guest agent's %d: %w", len(s.UserData), maxInputData, provider.ErrPrecondition)
	}
	rs, err := v.resources(ctx)
	if err != nil {
		return tagcloud.Machine{}, err
	}
	i := slices.IndexFunc(rs, func(r resource) bool { return r.VMID == tmpl })
	if i < 0 || !bool(rs[i].Template) {
		return tagcloud.Machine{}, fmt.Errorf("VM %d is not a template of the cluster: %w", tmpl, provider.ErrPrecondition)
	}
	from := rs[i].Node
	var next json.RawMessage
	if err := v.c.Get(ctx, "/cluster/nextid", &next); err != nil {
		return tagcloud.Machine{}, apiError(ctx, "get a free VM ID", err)
	}
	newID, err := vmID(strings.Trim(string(next), `"`))
	if err != nil {
		return tagcloud.Machine{}, fmt.Errorf("/cluster/nextid answered %s: %w", next, provider.ErrTransient)
	}
	clone := map[string]any{"newid": newID, "name": s.Name}
	if s.Region != from {
		clone["target"] = s.Region
	}
	m, err := v.create(ctx, s, from, tmpl, newID, clone, cores, memGiB, tags)
	if err != nil {
		// The clone is not tagged until it is configured, so the
		// lifecycle's rollback (which finds machines by their lease tag)
		// cannot see it: delete it here, whatever ended ctx, when it
		// carries the name of this lease's machine.
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), tagcloud.DefaultCallTimeout)
		defer cancel()
		if derr := v.deleteNamed(dctx, s.Region, newID, s.Name); derr != nil {
			v.log.Warn("proxmox clone left behind", "machine", machineID(s.Region, newID), "err", derr)
		}
		return tagcloud.Machine{}, err
	}
	return m, nil
}

// bootstrapCommand runs the bootstrap script, given as its standard
// input, once cloud-init is done with the first boot: cloud-init makes
// new SSH host keys then, which would replace the one the bootstrap
// installs (an image without cloud-init runs it at once).
var bootstrapCommand = []string{"/bin/sh", "-c", "cloud-init status --wait </dev/null >/dev/null 2>&1; exec /bin/sh -s"}

// maxInputData is the most the guest agent's exec takes as input.
const maxInputData = 65536

// create clones the template, configures, starts and bootstraps the VM.
func (v *vms) create(ctx context.Context, s tagcloud.Spec, from string, tmpl, newID int, clone map[string]any,
	cores, memGiB int, tags string) (tagcloud.Machine, error) {
	var upid string
	if err := v.c.Post(ctx, vmPath(from, tmpl)+"/clone", clone, &upid); err != nil {
		return tagcloud.Machine{}, apiError(ctx, fmt.Sprintf("clone template %d as VM %d", tmpl, newID), err)
	}
	if err := v.waitTask(ctx, upid); err != nil {
		return tagcloud.Machine{}, fmt.Errorf("clone template %d as VM %d: %w", tmpl, newID, err)
	}
	node, path := s.Region, vmPath(s.Region, newID)
	upid = ""
	if err := v.c.Post(ctx, path+"/config", map[string]any{
		"cores": cores, "memory": strconv.Itoa(memGiB * 1024), "tags": tags, "agent": "1",
		"sshkeys": sshKeysParam(s.AuthorizedKey), "ipconfig0": "ip=dhcp",
	}, &upid); err != nil {
		return tagcloud.Machine{}, apiError(ctx, "configure VM "+strconv.Itoa(newID), err)
	}
	if upid != "" {
		if err := v.waitTask(ctx, upid); err != nil {
			return tagcloud.Machine{}, fmt.Errorf("configure VM %d: %w", newID, err)
		}
	}
	upid = ""
	if err := v.c.Post(ctx, path+"/status/start", nil, &upid); err != nil {
		return tagcloud.Machine{}, apiError(ctx, "start VM "+strconv.Itoa(newID), err)
	}
	if err := v.waitTask(ctx, upid); err != nil {
		return tagcloud.Machine{}, fmt.Errorf("start VM %d on %s: %w", newID, node, err)
	}
	if err := v.waitAgent(ctx, path); err != nil {
		return tagcloud.Machine{}, fmt.Errorf("VM %d: %w", newID, err)
	}
	var exec struct {
		PID int `json:"pid"`
	}
	if err := v.c.Post(ctx, path+"/agent/exec", map[string]any{"command": bootstrapCommand, "input-data": s.UserData}, &exec); err != nil {
		return tagcloud.Machine{}, apiError(ctx, "run the bootstrap on VM "+strconv.Itoa(newID)+" through the guest agent", err)
	}
	v.log.Info("proxmox VM bootstrapping", "machine", machineID(node, newID), "pid", exec.PID)
	// The lifecycle reads the VM (and its address) next.
	return tagcloud.Machine{ID: machineID(node, newID), Tags: s.Tags, Running: true, Status: "running"}, nil
}

// sshKeysParam is the lease key as cloud-init's sshkeys: URL-encoded, a
// space as %20 (Proxmox decodes it as a URI component).
func sshKeysParam(key string) string {
	return strings.ReplaceAll(url.QueryEscape(strings.TrimSpace(key)+"\n"), "+", "%20")
}

// pause waits the backoff's next pause on the clock, or until ctx ends.
func (v *vms) pause(ctx context.Context, b *cloud.Backoff) error {
	select {
	case <-ctx.Done():
		return context.Cause(ctx)
	case <-v.clock.After(b.Next()):
		return nil
	}
}

// waitTask waits for the task upid to stop and fails unless it ended OK.
// A task that failed for lack of memory or disk space is
// provider.ErrCapacity, so that the next node or size is tried.
func (v *vms) waitTask(ctx context.Context, upid string) error {
	f := strings.Split(upid, ":")
	if len(f) < 3 || f[0] != "UPID" || f[1] == "" {
		return fmt.Errorf("task ID %q is not a UPID: %w", upid, provider.ErrTransient)
	}
	back := cloud.NewBackoff(v.poll)
	for {
		var st struct {
			Status     string `json:"status"`
			ExitStatus string `json:"exitstatus"`
		}
		if err := v.c.Get(ctx, "/nodes/"+url.PathEscape(f[1])+"/tasks/"+url.PathEscape(upid)+"/status", &st); err != nil {
			return apiError(ctx, "read task "+upid, err)
		}
		if st.Status == "stopped" {
			if st.ExitStatus == "OK" {
				return nil
			}
			kind := provider.ErrPrecondition
			if noRoom(st.ExitStatus) {
				kind = provider.ErrCapacity
			}
			return fmt.Errorf("task %s failed: %s: %w", upid, st.ExitStatus, kind)
		}
		if err := v.pause(ctx, back); err != nil {
			return fmt.Errorf("wait for task %s: %w", upid, err)
		}
	}
}

// noRoom reports whether a Proxmox message says a node has no room.
func noRoom(msg string) bool {
	msg = strings.ToLower(msg)
	for _, s := range []string{"cannot allocate memory", "not enough memory", "out of memory", "no space left", "insufficient"} {
		if strings.Contains(msg, s) {
			return true
		}
	}
	return false
}

// waitAgent waits until the VM's guest agent answers a ping.
func (v *vms) waitAgent(ctx context.Context, path string) error {
	back := cloud.NewBackoff(v.poll)
	for {
		err := v.c.Post(ctx, path+"/agent/ping", nil, nil)
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return fmt.Errorf("wait for the guest agent: %w (last: %w)", context.Cause(ctx), err)
		}
		if proxmox.IsNotAuthorized(err) || proxmox.IsNotFound(err) {
			return apiError(ctx, "ping the guest agent", err)
		}
		if err := v.pause(ctx, back); err != nil {
			return fmt.Errorf("wait for the guest agent: %w", err)
		}
	}
}

// status is a VM's current status.
type status struct {
	Name   string `json:"name"`
	Status string `json:"status"`
	Tags   string `json:"tags"`
}

func (v *vms) Get(ctx context.Context, id string) (tagcloud.Machine, error) {
	node, vmid, err := parseID(id)
	if err != nil {
		return tagcloud.Machine{}, err
	}
	var st status
	if err := v.c.Get(ctx, vmPath(node, vmid)+"/status/current", &st); err != nil {
		return tagcloud.Machine{}, apiError(ctx, "read VM "+id, err)
	}
	m := tagcloud.Machine{ID: id, Tags: crabboxTags(st.Tags), Running: st.Status == "running", Status: st.Status}
	if m.Running {
		m.IPv4 = v.address(ctx, node, vmid)
	}
	return m, nil
}

// address is the VM's first IPv4 address that the guest agent reports
// on an interface other than lo (not 127.0.0.1, not link-local), or ""
// when the agent does not answer yet or reports none.
func (v *vms) address(ctx context.Context, node string, vmid int) string {
	var out struct {
		Result []struct {
			Name      string `json:"name"`
			Addresses []struct {
				Type string `json:"ip-address-type"`
				IP   string `json:"ip-address"`
			} `json:"ip-addresses"`
		} `json:"result"`
	}
	if err := v.c.Get(ctx, vmPath(node, vmid)+"/agent/network-get-interfaces", &out); err != nil {
		v.log.Debug("no address from the guest agent yet", "machine", machineID(node, vmid), "err", err)
		return ""
	}
	for _, iface := range out.Result {
		if iface.Name == "lo" {
			continue
		}
		for _, a := range iface.Addresses {
			ip := net.ParseIP(a.IP)
			if a.Type == "ipv4" && ip != nil && ip.To4() != nil && !ip.Equal(net.IPv4(127, 0, 0, 1)) && !ip.IsLinkLocalUnicast() && !ip.IsUnspecified() {
				return ip.String()
			}
		}
	}
	return ""
}

func (v *vms) List(ctx context.Context, tag string) ([]tagcloud.Machine, error) {
	rs, err := v.resources(ctx)
	if err != nil {
		return nil, err
	}
	var out []tagcloud.Machine
	for _, r := range rs {
		tags := crabboxTags(r.Tags)
		if bool(r.Template) || !slices.Contains(tags, tag) {
			continue
		}
		m := tagcloud.Machine{ID: machineID(r.Node, r.VMID), Tags: tags, Running: r.Status == "running", Status: r.Status}
		if m.Running {
			m.IPv4 = v.address(ctx, r.Node, r.VMID)
		}
		out = append(out, m)
	}
	return out, nil
}

func (v *vms) SetTags(ctx context.Context, m tagcloud.Machine, tags []string) (tagcloud.Machine, error) {
	node, vmid, err := parseID(m.ID)
	if err != nil {
		return tagcloud.Machine{}, err
	}
	t, err := pveTags(tags)
	if err != nil {
		return tagcloud.Machine{}, err
	}
	if err := v.c.Put(ctx, vmPath(node, vmid)+"/config", map[string]any{"tags": t}, nil); err != nil {
		return tagcloud.Machine{}, apiError(ctx, "tag VM "+m.ID, err)
	}
	return v.Get(ctx, m.ID)
}

func (v *vms) Delete(ctx context.Context, id string) error {
	node, vmid, err := parseID(id)
	if err != nil {
		return err
	}
	return v.destroy(ctx, node, vmid, func(status) bool { return true })
}

// deleteNamed deletes VM vmid on node if it exists and is named name.
func (v *vms) deleteNamed(ctx context.Context, node string, vmid int, name string) error {
	return v.destroy(ctx, node, vmid, func(st status) bool { return st.Name == name })
}

// destroy stops and destroys VM vmid on node (its disks too) if ok says
// so of its status; a VM that is gone counts as destroyed.
func (v *vms) destroy(ctx context.Context, node string, vmid int, ok func(status) bool) error {
	path, id := vmPath(node, vmid), machineID(node, vmid)
	var st status
	if err := v.c.Get(ctx, path+"/status/current", &st); err != nil {
		if proxmox.IsNotFound(err) {
			return nil
		}
		return apiError(ctx, "read VM "+id, err)
	}
	if !ok(st) {
		return nil
	}
	if st.Status != "stopped" {
		var upid string
		if err := v.c.Post(ctx, path+"/status/stop", nil, &upid); err != nil && !proxmox.IsNotFound(err) {
			return apiError(ctx, "stop VM "+id, err)
		}
		if upid != "" {
			if err := v.waitTask(ctx, upid); err != nil {
				return fmt.Errorf("stop VM %s: %w", id, err)
			}
		}
	}
	var upid string
	if err := v.c.Delete(ctx, path+"?purge=1&destroy-unreferenced-disks=1", &upid); err != nil {
		if proxmox.IsNotFound(err) {
			return nil
		}
		return apiError(ctx, "destroy VM "+id, err)
	}
	if err := v.waitTask(ctx, upid); err != nil {
		return fmt.Errorf("destroy VM %s: %w", id, err)
	}
	return nil
}

// apiError names the operation and classifies a go-proxmox error as one of
// the provider's portable errors, keeping the client's error reachable. A
// request ended by ctx is reported with ctx's error.
func apiError(ctx context.Context, op string, err error) error {
	if ctx.Err() != nil {
		return fmt.Errorf("%s: %w", op, context.Cause(ctx))
	}
	var kind error
	var e *proxmox.APIError
	code := 0
	if errors.As(err, &e) {
		code = e.StatusCode
	}
	switch {
	case proxmox.IsNotAuthorized(err):
		kind = provider.ErrUnauthenticated
	case proxmox.IsNotFound(err):
		kind = provider.ErrNotFound
	case noRoom(err.Error()):
		kind = provider.ErrCapacity
	case code >= 400 && code < 500 && code != http.StatusTooManyRequests && code != http.StatusRequestTimeout:
		kind = provider.ErrPrecondition
	default:
		kind = provider.ErrTransient
	}
	return fmt.Errorf("%s: %w: %w", op, kind, err)
}

// sdkLogger sends the client's warnings and errors to the runtime's
// logger. Its debug and info lines are dropped: they hold request bodies,
// and a bootstrap carries the box's private host key.
type sdkLogger struct{ log *slog.Logger }

func (l sdkLogger) Errorf(format string, v ...any) { l.log.Error(fmt.Sprintf(format, v...)) }
func (l sdkLogger) Warnf(format string, v ...any)  { l.log.Warn(fmt.Sprintf(format, v...)) }
func (sdkLogger) Debugf(string, ...any)            {}
func (sdkLogger) Infof(string, ...any)             {}
