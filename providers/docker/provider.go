// Package docker is the crabbox provider whose boxes are containers on the
// local Docker engine, driven through the engine's API (the official Go
// client; no docker CLI).
//
// Every lease is one container named crabbox-<slug>-<leaseID>. Its only
// process is a static linux agent (crabbox's own SSH server on port 2222,
// which the engine publishes on 127.0.0.1 only), bind-mounted read-only
// from this machine, so nothing is copied into the container and any image
// with /bin/sh is a box, no sshd needed. The agent gets its lease
// directory (the box's host key, made here, so the first SSH connection is
// already strict, and the lease record with the lease key) on its stdin
// as the container starts, over the attach that reads its ready line.
//
// The agent stops at the lease's expiry, which Touch moves by rewriting the
// lease record inside the container; the container then exits and the
// engine removes it (AutoRemove), so an abandoned box goes away without
// anyone running cleanup. Every container carries ownership labels
// (crabbox=true, provider, lease, slug, created_at, expires_at, keep, ...);
// Cleanup deletes only containers the caller holds a claim for.
//
// Checkpoints (checkpoint.go) commit a box's container to a local image,
// labelled like the boxes; Fork and Restore start containers from it.
//
// Engines often have no registry access, so BuildImage makes the default
// box image locally (a minimal Debian root filesystem from debootstrap,
// imported through the API), and ImportImage imports any root filesystem.
package docker

import (
	"errors"
	"fmt"
	"net/url"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/docker/go-units"

	"github.com/crabbox-dev/crabbox/provider"
	eng "github.com/crabbox-dev/crabbox/providers/docker/internal/engine"
)

// Name is the provider's registered name.
const Name = "docker"

// DefaultImage is the box image used when none is configured: the image
// `crabbox image build --provider docker` makes.
const DefaultImage = "crabbox/box:bookworm"

// Config is the docker provider's typed configuration.
type Config struct {
	// Image is the box image. It must exist on the engine (nothing is
	// pulled) and have /bin/sh.
	Image string
	// DesktopImage is the box image of a lease asked for with a desktop
	// (provider.DesktopLabel): one `crabbox image build --desktop` made.
	// Empty means DefaultDesktopImage.
	DesktopImage string
	// Agent is a static linux executable for the engine's architecture,
	// a build of the small agent (providers/docker/internal/agent) or of
	// the crabbox CLI, bind-mounted into every container and run there as
	// `crabbox agent`. Empty means the small agent, built once and kept in
	// the user's cache directory, or else the running executable if it is
	// such a build of the CLI.
	Agent string
	// NanoCPUs limits the container's CPUs in billionths of a CPU; 0 means
	// no limit.
	NanoCPUs int64
	// Memory limits the container's memory in bytes; 0 means no limit.
	Memory int64
	// Network is the engine network the container joins; empty means the
	// engine's default bridge.
	Network string
	// Labels are extra labels put on every container.
	Labels map[string]string
	// Host is the engine's address (unix:///var/run/docker.sock,
	// tcp://127.0.0.1:2375); empty means DOCKER_HOST or the default socket.
	Host string
	// StateDir is where Acquire keeps a lock file per acquire in progress,
	// so that Cleanup can tell an acquire whose process died (and delete
	// its container at once) from one still running. Empty disables that:
	// a half-made container is then deleted only after its expiry.
	StateDir string
}

var spec = provider.Spec{
	Name:        Name,
	Aliases:     []string{"container", "local-container"},
	Description: "a container on the local Docker engine, served by crabbox's own SSH server on 127.0.0.1",
	Kind:        provider.KindSSHLease,
	Targets:     []provider.Target{provider.TargetLinux},
	Features: []provider.Feature{
		provider.FeatureSSH, provider.FeaturePinnedHostKey, provider.FeatureSelfExpiry,
		provider.FeatureCleanup, provider.FeatureDoctor, provider.FeaturePTY,
		provider.FeatureCheckpoint, provider.FeatureFork, provider.FeatureRestore,
		provider.FeatureDesktop,
	},
	Coordinator: provider.CoordinatorUnsupported,
	Options: []provider.Option{
		{
			Name: "image", Flag: "docker-image", Default: DefaultImage,
			Help: "box image; must exist on the engine and have /bin/sh (make the default with: crabbox image build --provider docker)",
		},
		{
			Name: "desktop-image", Flag: "docker-desktop-image", Default: DefaultDesktopImage,
			Help: "box image of leases with a desktop (--desktop); make it with: crabbox image build --provider docker --desktop",
		},
		{
			Name: "agent", Flag: "docker-agent",
			Help: "static linux agent (or crabbox) executable that serves each box (default: a small agent built once and cached)",
		},
		{Name: "cpus", Flag: "cpus", Help: "CPUs a box may use, like 2 or 1.5 (default: no limit)"},
		{Name: "memory", Flag: "memory", Help: "memory a box may use, like 2g or 512m (default: no limit)"},
		{Name: "network", Flag: "docker-network", Help: "engine network the containers join (default: the engine's bridge)"},
		{Name: "labels", Flag: "docker-labels", Help: "extra container labels, as key=value,key=value"},
		{Name: "host", Flag: "docker-host", Help: "engine address (default: DOCKER_HOST or the default socket); must be on this machine", Locates: true},
	},
}

// Provider is the registered docker provider.
type Provider struct{}

func init() { provider.Register(Provider{}) }

// Spec describes the docker provider.
func (Provider) Spec() provider.Spec {
	return spec.Clone()
}

// Configure parses cfg (already merged with the Spec's defaults) and returns
// a Backend. It does not contact the engine.
func (Provider) Configure(cfg provider.Config, rt provider.Runtime) (provider.Backend, error) {
	c, err := ParseConfig(cfg)
	if err != nil {
		return nil, err
	}
	if rt.StateDir != "" {
		c.StateDir = filepath.Join(rt.StateDir, Name)
	}
	return New(c, rt)
}

// ParseConfig turns the provider's raw settings into a Config, naming the
// setting that is wrong.
func ParseConfig(cfg provider.Config) (Config, error) {
	c := Config{Image: cfg["image"], DesktopImage: cfg["desktop-image"], Agent: cfg["agent"], Network: cfg["network"], Host: cfg["host"]}
	if c.Image == "" {
		c.Image = DefaultImage
	}
	if c.DesktopImage == "" {
		c.DesktopImage = DefaultDesktopImage
	}
	if v := cfg["cpus"]; v != "" {
		f, err := strconv.ParseFloat(v, 64)
		if err != nil || f <= 0 || f > 1024 {
			return Config{}, fmt.Errorf("docker provider: cpus %q is not a positive number of CPUs (like 2 or 1.5)", v)
		}
		c.NanoCPUs = int64(f * 1e9)
	}
	if v := cfg["memory"]; v != "" {
		n, err := units.RAMInBytes(v)
		if err != nil || n <= 0 {
			return Config{}, fmt.Errorf("docker provider: memory %q is not an amount of memory (like 2g or 512m)", v)
		}
		c.Memory = n
	}
	labels, err := parseLabels(cfg["labels"])
	if err != nil {
		return Config{}, fmt.Errorf("docker provider: labels: %w", err)
	}
	c.Labels = labels
	if err := c.check(); err != nil {
		return Config{}, err
	}
	return c, nil
}

// check rejects settings that cannot work or would expose a box.
func (c Config) check() error {
	switch {
	case c.Image == "":
		return errors.New("docker provider: no image")
	case c.DesktopImage != "" && checkImageRef(c.DesktopImage) != nil:
		return fmt.Errorf("docker provider: desktop image %q: %w", c.DesktopImage, checkImageRef(c.DesktopImage))
	case c.Network == "host":
		return errors.New(`docker provider: network "host" is not supported: a box's SSH port must be published on 127.0.0.1 only`)
	case c.Network == "none":
		return errors.New(`docker provider: network "none" is not supported: a box's SSH port could not be reached`)
	case strings.HasPrefix(c.Network, "container:"):
		return fmt.Errorf("docker provider: network %q is not supported: a box needs its own network stack", c.Network)
	}
	for k := range c.Labels {
		if err := checkExtraLabel(k); err != nil {
			return fmt.Errorf("docker provider: %w", err)
		}
	}
	if c.Host != "" {
		if err := checkLocalHost(c.Host); err != nil {
			return fmt.Errorf("docker provider: host: %w", err)
		}
	}
	return nil
}

// checkLocalHost accepts only engines on this machine: a box's SSH port is
// published on the engine host's loopback, which is only ours when the
// engine runs here.
func checkLocalHost(host string) error {
	u, err := eng.ParseHost(host)
	if err != nil {
		return err
	}
	switch u.Scheme {
	case "unix", "npipe":
		return nil
	case "tcp", "http", "https":
		if h := u.Hostname(); h == "localhost" || h == "127.0.0.1" || h == "::1" {
			return nil
		}
	}
	return fmt.Errorf("%q is not an engine on this machine (a box's SSH port is published on the engine host's 127.0.0.1)", (&url.URL{Scheme: u.Scheme, Host: u.Host}).String())
}

// parseLabels parses "k=v,k2=v2".
func parseLabels(s string) (map[string]string, error) {
	out := map[string]string{}
	for part := range strings.SplitSeq(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		k, v, ok := strings.Cut(part, "=")
		k = strings.TrimSpace(k)
		if !ok || k == "" {
			return nil, fmt.Errorf("%q is not key=value", part)
		}
		if _, dup := out[k]; dup {
			return nil, fmt.Errorf("label %q given twice", k)
		}
		out[k] = strings.TrimSpace(v)
	}
	return out, nil
}

var (
	_ provider.Provider        = Provider{}
	_ provider.SSHLeaseBackend = (*Backend)(nil)
	_ provider.CleanupBackend  = (*Backend)(nil)
	_ provider.DoctorBackend   = (*Backend)(nil)
)
