// Package runpod is crabbox's RunPod provider: every lease is a fresh
// RunPod GPU pod, reached over SSH at the pod's public IP and the public
// port RunPod maps to its port 22. It speaks RunPod's REST API
// (https://rest.runpod.io/v1) with net/http only (internal/runpodapi), so
// the crabbox command links it in-process.
//
// # Classes
//
// A class names GPU types, tried in order (gpuTypeIds, one create per
// type while RunPod has no machine for it), and a GPU count (gpuCount):
// small (RTX A4000, RTX 4000 Ada, L4; one GPU), standard (RTX 4090, RTX
// A5000, RTX 3090; one), large (A100 80GB PCIe, A100 SXM4 80GB, H100
// 80GB HBM3; one) and large-x2 (the same, two). The gpu-type and
// gpu-count options replace the class's. cloud-type (SECURE or
// COMMUNITY), container-disk (GB), data-center and image complete the
// pod. The pod has no volume (volumeInGb 0), so nothing outlives it.
//
// # The box
//
// RunPod pods are containers: there is no cloud-init. The pod runs the
// image's shell as its entrypoint with a start command of crabbox's
// (startCommand) that arms a watchdog, decodes the bootstrap (the same
// script the VM clouds run from user data: the crabbox user with only the
// lease key, the host key the client made, sshd on port 22) from the
// pod's CRABBOX_BOOTSTRAP environment variable, runs it and sleeps. The
// lease key is also set as PUBLIC_KEY and SSH_PUBLIC_KEY, the variables
// RunPod's images read for authorized keys, so that RunPod injects no
// account key instead. The bootstrap carries the box's private host key:
// like user data on the VM clouds, it is readable through the API by the
// holder of the API key (and only that), never logged and never in an
// error. The start command unsets it before it sleeps.
//
// # Labels and expiry
//
// RunPod pods have no tags, and changing a pod (PATCH /pods/{id}) may
// reset it, wiping its container disk: the provider never changes a pod.
// That is why it does not build on providers/internal/tagcloud, whose
// lifecycle rewrites a machine's tags after its creation (ready, the SSH
// port, every touch, failed or released on a failed delete); it uses the
// same shared pieces (cloud.StartAcquire, the rollback stack,
// FirstWithCapacity, WaitForSSH, ResolveLive, Sweep) directly.
// crabbox's ownership labels are written once, at creation, in the pod's
// CRABBOX_LABELS environment variable (read back with the pod), and its
// name is crabbox-<lease ID>. So:
//
//   - The pod's expires_at label is the lease's hard end, its creation
//     plus its TTL, not the idle expiry: touches cannot move a label, and
//     cleanup must never delete a lease that is in use. Touch records the
//     activity in the backend (the library keeps the lease's idle expiry
//     in its own record); it refuses an expiry past the hard end with
//     provider.ErrPrecondition rather than pretend. So cleanup deletes an
//     idle, abandoned pod only after its TTL, not its idle timeout.
//   - The state label is written as ready. A pod whose release or
//     rollback could not delete it is stopped instead (POST
//     /pods/{id}/stop), and a stopped crabbox pod counts as released:
//     it no longer resolves and cleanup deletes it at once.
//   - The watchdog deletes the pod at its hard end from inside, with the
//     pod-scoped RUNPOD_API_KEY and RUNPOD_POD_ID RunPod injects into
//     every pod (runpodctl, else curl against the API), retrying each
//     minute. It is best effort (an image without runpodctl and curl
//     cannot), so the provider does not claim self-expiry.
//
// RunPod sets no maximum lifetime of its own, so there is no lifetime
// cap; the TTL is the pod's end.
//
// # Price
//
// The pod's costPerHr (USD per hour, as RunPod reports it for the pod)
// is in every target's labels as hourly_usd, with the GPU type RunPod
// chose as server_type and the count as gpu_count, for usage to show and
// the coordinator to record.
package runpod

import (
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/crabbox-dev/crabbox/provider"
	"github.com/crabbox-dev/crabbox/providers/internal/cloud"
	"github.com/crabbox-dev/crabbox/providers/runpod/internal/runpodapi"
)

// Name is the provider's registered name.
const Name = "runpod"

// KeyEnv holds the RunPod API key.
const KeyEnv = "RUNPOD_API_KEY"

// Defaults of the options.
const (
	DefaultClass         = "standard"
	DefaultCloudType     = "SECURE"
	DefaultContainerDisk = 40
	// DefaultImage is RunPod's PyTorch image, which has sshd, git, curl
	// and runpodctl.
	DefaultImage       = "runpod/pytorch:1.0.2-cu1281-torch280-ubuntu2404"
	DefaultBootTimeout = 15 * time.Minute
)

// Label keys the provider adds to its targets (read from the pod, never
// written to it).
const (
	LabelHourlyUSD = "hourly_usd"
	LabelGPUCount  = "gpu_count"
)

// Class is a named choice of GPU types (tried in order) and count.
type Class struct {
	GPUTypes []string
	GPUCount int
}

// Classes are the built-in classes.
func Classes() map[string]Class {
	large := []string{"NVIDIA A100 80GB PCIe", "NVIDIA A100-SXM4-80GB", "NVIDIA H100 80GB HBM3"}
	return map[string]Class{
		"small":    {GPUTypes: []string{"NVIDIA RTX A4000", "NVIDIA RTX 4000 Ada Generation", "NVIDIA L4"}, GPUCount: 1},
		"standard": {GPUTypes: []string{"NVIDIA GeForce RTX 4090", "NVIDIA RTX A5000", "NVIDIA GeForce RTX 3090"}, GPUCount: 1},
		"large":    {GPUTypes: large, GPUCount: 1},
		"large-x2": {GPUTypes: large, GPUCount: 2},
	}
}

func classNames() string {
	var names []string
	for n := range Classes() {
		names = append(names, n)
	}
	slices.Sort(names)
	return strings.Join(names, ", ")
}

// Config is the RunPod provider's typed configuration.
type Config struct {
	// Key is the API key. Configure takes it from RUNPOD_API_KEY only.
	Key string
	// Class names GPU types and a count (Classes); DefaultClass when empty.
	Class string
	// GPUTypes, when set, replace the class's GPU types (tried in order).
	GPUTypes []string
	// GPUCount, when set, replaces the class's GPU count.
	GPUCount int
	// CloudType is SECURE or COMMUNITY.
	CloudType string
	// ContainerDiskGB is the container disk's size.
	ContainerDiskGB int
	// DataCenters, when set, are the data centers the pod may be in.
	DataCenters []string
	// Image is the container image; it must have sshd and a POSIX shell.
	Image string
	// Prepared says the image has git and tar: the bootstrap installs
	// nothing.
	Prepared bool
	// WorkRoot is the box's work root.
	WorkRoot string
	// Owner is recorded in the owner label; the OS user when empty.
	Owner string
	// BootTimeout bounds the wait for the pod's address and SSH.
	BootTimeout time.Duration
	// Endpoint is the API's base URL; runpodapi.DefaultEndpoint when empty.
	Endpoint string

	// The fields below have no option: only a Go program sets them.

	// PollInterval is the longest pause of the waits; 2 s when zero.
	PollInterval time.Duration
	// MapAddress, if set, rewrites a pod's address and port to where
	// crabbox connects (a test's fake box).
	MapAddress func(host string, port int) (string, int)
	// Retry bounds the API's retries; runpodapi.DefaultRetry when zero.
	Retry runpodapi.Retry
}

// Provider is the registered RunPod provider.
type Provider struct{}

func init() { provider.Register(Provider{}) }

var spec = provider.Spec{
	Name:        Name,
	Description: "a fresh RunPod GPU pod per lease, over SSH (API key from " + KeyEnv + ")",
	Kind:        provider.KindSSHLease,
	Targets:     []provider.Target{provider.TargetLinux},
	Features: []provider.Feature{
		provider.FeatureSSH, provider.FeaturePinnedHostKey, provider.FeatureCleanup, provider.FeatureDoctor,
	},
	Coordinator: provider.CoordinatorSupported,
	Credentials: []provider.Credential{{Env: []string{KeyEnv}}},
	Options: slices.Concat([]provider.Option{
		{Name: "class", Flag: "runpod-class", Default: DefaultClass, Help: "GPU class: " + classNames()},
		{Name: "gpu-type", Flag: "runpod-gpu-type", Help: "RunPod GPU types to try in order, comma-separated (replaces the class's), like \"NVIDIA L4\""},
		{Name: "gpu-count", Flag: "runpod-gpu-count", Help: "GPUs per pod (replaces the class's)"},
		{Name: "cloud-type", Flag: "runpod-cloud-type", Default: DefaultCloudType, Help: "SECURE or COMMUNITY"},
		{Name: "container-disk", Flag: "runpod-container-disk", Default: strconv.Itoa(DefaultContainerDisk), Help: "container disk in GB (wiped with the pod)"},
		{Name: "data-center", Flag: "runpod-data-center", Help: "data centers the pod may be in, comma-separated (default: any)"},
		{Name: "image", Flag: "runpod-image", Default: DefaultImage, Help: "container image with sshd and a POSIX shell"},
	}, cloud.BoxOptions(Name, "owner label on pods", "pod", DefaultBootTimeout), []provider.Option{
		cloud.EndpointOption(Name, "RunPod", ""),
	}),
}

// Spec describes the RunPod provider.
func (Provider) Spec() provider.Spec { return spec.Clone() }

// Configure parses cfg (already merged with the Spec's defaults), takes
// the API key from RUNPOD_API_KEY and returns a Backend. It makes no API
// call.
func (Provider) Configure(cfg provider.Config, rt provider.Runtime) (provider.Backend, error) {
	c, err := Parse(cfg)
	if err != nil {
		return nil, err
	}
	if c.Key = os.Getenv(KeyEnv); c.Key == "" {
		return nil, cloud.MissingCredential(Name, KeyEnv, "create an API key (read/write) in the RunPod console's settings and export it")
	}
	return New(c, rt)
}

// Parse turns the provider's options into a Config (without the key),
// naming the option that is wrong.
func Parse(cfg provider.Config) (Config, error) {
	c := Config{
		Class: strings.TrimSpace(cfg["class"]), GPUTypes: cloud.List(cfg["gpu-type"]),
		CloudType: strings.ToUpper(strings.TrimSpace(cfg["cloud-type"])), DataCenters: cloud.List(cfg["data-center"]),
		Image: strings.TrimSpace(cfg["image"]), WorkRoot: cfg["work-root"], Owner: strings.TrimSpace(cfg["owner"]),
		Endpoint: strings.TrimSpace(cfg["endpoint"]),
	}
	var err error
	if strings.TrimSpace(cfg["gpu-count"]) != "" {
		if c.GPUCount, err = cfg.Int("gpu-count"); err != nil {
			return c, fmt.Errorf("%s provider: %w", Name, err)
		}
		if c.GPUCount < 1 {
			return c, fmt.Errorf("%s provider: option gpu-count: %d is not a positive number of GPUs", Name, c.GPUCount)
		}
	}
	if strings.TrimSpace(cfg["container-disk"]) != "" {
		if c.ContainerDiskGB, err = cfg.Int("container-disk"); err != nil {
			return c, fmt.Errorf("%s provider: %w", Name, err)
		}
	}
	if c.Prepared, c.BootTimeout, err = cloud.ParseBootOptions(Name, cfg); err != nil {
		return c, err
	}
	return c, nil
}

// class is the GPU types and count c asks for.
func (c Config) class() Class {
	cl := Classes()[c.Class]
	if len(c.GPUTypes) > 0 {
		cl.GPUTypes = c.GPUTypes
	}
	if c.GPUCount > 0 {
		cl.GPUCount = c.GPUCount
	}
	return cl
}

// withDefaults fills in the defaults of c and checks it, naming the
// option that is wrong.
func (c Config) withDefaults() (Config, error) {
	bad := func(opt, format string, args ...any) (Config, error) {
		return c, fmt.Errorf("%s provider: option %s: %s", Name, opt, fmt.Sprintf(format, args...))
	}
	if c.Key == "" {
		return c, fmt.Errorf("%s provider: no API key (set %s): %w", Name, KeyEnv, provider.ErrUnauthenticated)
	}
	if strings.ContainsAny(c.Key, " \t\r\n") {
		return c, fmt.Errorf("%s provider: %s holds white space: %w", Name, KeyEnv, provider.ErrUnauthenticated)
	}
	if c.Class == "" {
		c.Class = DefaultClass
	}
	if _, ok := Classes()[c.Class]; !ok {
		return bad("class", "%q is not a class (%s)", c.Class, classNames())
	}
	for _, t := range c.GPUTypes {
		if len(t) > 100 || strings.ContainsAny(t, ",\"'\\\n\r\t") {
			return bad("gpu-type", "%q is not a RunPod GPU type ID", t)
		}
	}
	if c.GPUCount < 0 || c.GPUCount > 16 {
		return bad("gpu-count", "%d: want 1 to 16", c.GPUCount)
	}
	if c.CloudType == "" {
		c.CloudType = DefaultCloudType
	}
	if c.CloudType != "SECURE" && c.CloudType != "COMMUNITY" {
		return bad("cloud-type", "%q: want SECURE or COMMUNITY", c.CloudType)
	}
	if c.ContainerDiskGB == 0 {
		c.ContainerDiskGB = DefaultContainerDisk
	}
	if c.ContainerDiskGB < 10 || c.ContainerDiskGB > 4096 {
		return bad("container-disk", "%d GB: want 10 to 4096", c.ContainerDiskGB)
	}
	for _, d := range c.DataCenters {
		if !validID(d) {
			return bad("data-center", "%q is not a data center ID like EU-RO-1", d)
		}
	}
	if c.Image == "" {
		c.Image = DefaultImage
	}
	if len(c.Image) > 300 || strings.ContainsAny(c.Image, " \t\r\n\"'\\") {
		return bad("image", "%q is not an image reference", c.Image)
	}
	if c.WorkRoot == "" {
		c.WorkRoot = cloud.DefaultWorkRoot
	}
	if err := cloud.CheckWorkRoot(c.WorkRoot); err != nil {
		return bad("work-root", "%v", err)
	}
	if c.Owner == "" {
		c.Owner = cloud.CurrentUser()
	}
	switch {
	case c.BootTimeout == 0:
		c.BootTimeout = DefaultBootTimeout
	case c.BootTimeout < 0:
		return bad("boot-timeout", "%s is negative", c.BootTimeout)
	}
	if c.Endpoint == "" {
		c.Endpoint = runpodapi.DefaultEndpoint
	}
	if err := cloud.CheckEndpoint(c.Endpoint); err != nil {
		return bad("endpoint", "%v", err)
	}
	if c.PollInterval <= 0 {
		c.PollInterval = 2 * time.Second
	}
	if c.MapAddress == nil {
		c.MapAddress = func(h string, p int) (string, int) { return h, p }
	}
	if c.Retry.Attempts == 0 {
		c.Retry = runpodapi.DefaultRetry
	}
	return c, nil
}

func validID(s string) bool {
	if s == "" || len(s) > 40 {
		return false
	}
	for _, r := range s {
		if !(r >= 'A' && r <= 'Z' || r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-' || r == '_') {
			return false
		}
	}
	return true
}

var (
	_ provider.Provider        = Provider{}
	_ provider.SSHLeaseBackend = (*Backend)(nil)
	_ provider.CleanupBackend  = (*Backend)(nil)
	_ provider.DoctorBackend   = (*Backend)(nil)
)
