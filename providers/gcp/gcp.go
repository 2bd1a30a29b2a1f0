// Package gcp is the Google Compute Engine provider: each lease is one
// Compute Engine instance (spot by default, standard when the zone has no
// spot capacity), made through the official SDK
// (cloud.google.com/go/compute/apiv1) and turned into a crabbox box by the
// shared bootstrap (providers/internal/cloud).
//
// # Acquire
//
// Acquire runs these steps, and on any failure, or when its context ends,
// deletes what it created so far, newest first (cloud.Rollback):
//
//  1. firewall: find the rule "crabbox-ssh-<hash>" on the network, which
//     lets the configured source range reach the SSH ports (2222 and 22) of
//     instances with the "crabbox" network tag, or create it. Firewall
//     rules have no labels: crabbox marks its rules by their description,
//     and a rule of that name without the marker is never used or
//     changed. Rollback deletes a rule this acquire created, unless another
//     crabbox instance of the project still relies on it.
//  2. create: insert the instance "crabbox-<lease>" with the ownership
//     labels (cloud.GCPLabels), the bootstrap as the user-data metadata
//     (and a startup-script that runs it where the image has no cloud-init),
//     the lease key as its only ssh-keys entry, OS Login off,
//     maxRunDuration set to the lease's TTL with the termination action
//     DELETE (Compute Engine itself deletes the box at its TTL), as SPOT
//     first in every zone, then STANDARD, moving on only on capacity
//     errors. Rollback deletes every instance labelled with the lease, found
//     by label in every zone, so it works even when the answer was lost.
//  3. address: wait until the instance runs with an external address.
//  4. ssh: wait until sshd answers with the host key the client made and
//     put into the user data (cloud.WaitForSSH), on 2222, else 22.
//  5. label: set the labels state=ready and ssh_port with the instance's
//     label fingerprint.
//
// # Ownership, release and cleanup
//
// Release, Resolve, Touch, List and Cleanup find instances only by their
// labels (crabbox=true, provider=gcp, lease=<id>) in every configured
// zone, never by name. Cleanup deletes an instance only when
// cloud.DecideCleanup says so, which needs a claim of the caller, and
// decides again on the freshly re-read instance just before deleting it.
//
// # Checkpoints
//
// A native checkpoint is a machine image of the lease's instance
// (machineImages.insert with the instance as sourceInstance; the box
// keeps running), named "crabbox-<checkpoint>" and labelled with the
// ownership labels (crabbox=true, created_by=crabbox, provider=gcp,
// owner), checkpoint, source_lease and the caller's labels.
// CreateCheckpoint waits until it is READY and, when it fails, deletes
// the machine images labelled with its checkpoint. ListCheckpoints finds
// machine images by those labels; DeleteCheckpoint deletes one (a machine
// image holds its disks' data itself: nothing else stays billed) and
// never one without them.
//
// Fork is Acquire of an instance made from the machine image
// (instances.insert with sourceMachineImage, no disks of its own), with a
// fresh bootstrap in its metadata: the new box accepts only the new lease
// key and has a new host key. Instances record their work root in the
// crabbox-work-root metadata item.
//
// Restore rebuilds the box, as Compute Engine cannot put a machine image
// back onto an existing instance: it makes a replacement instance of the
// lease ("crabbox-<lease>-r<hex>") from the machine image with a fresh
// bootstrap (the request's key, a new host key, maxRunDuration set to
// what is left of the lease's TTL), waits for its SSH, labels it ready and
// deletes the old instance. Until it is labelled ready the replacement is
// not the lease's live instance; if anything fails it is deleted and the
// old instance stays as it was. The restored box has a new address and
// host key, which the returned target carries.
//
// # Credentials
//
// Credentials come from the SDK's Application Default Credentials chain
// (GOOGLE_APPLICATION_CREDENTIALS, gcloud's application-default login,
// the metadata server) and never appear in options, arguments, logs,
// errors or claims.
package gcp

import (
	"context"
	"fmt"
	"sync"

	compute "cloud.google.com/go/compute/apiv1"
	"google.golang.org/api/option"

	"github.com/crabbox-dev/crabbox/provider"
	"github.com/crabbox-dev/crabbox/providers/gcp/gcpspec"
)

// Name is the provider's registered name.
const Name = gcpspec.Name

// Provider is the registered "gcp" provider. Its zero value is ready to use.
type Provider struct{}

var (
	_ provider.Provider        = Provider{}
	_ provider.SSHLeaseBackend = (*Backend)(nil)
	_ provider.CleanupBackend  = (*Backend)(nil)
)

func init() { provider.Register(Provider{}) }

// Spec describes the provider.
func (Provider) Spec() provider.Spec { return spec.Clone() }

// Configure parses cfg and returns the backend. It contacts nothing and
// resolves no credentials: that happens on the first API call.
func (Provider) Configure(cfg provider.Config, rt provider.Runtime) (provider.Backend, error) {
	c, err := ParseConfig(cfg)
	if err != nil {
		return nil, err
	}
	return New(c, rt)
}

// Backend is the Compute Engine lease backend.
type Backend struct {
	cfg Config
	rt  provider.Runtime

	mu  sync.Mutex // guards api
	api *clients
}

// clients are the SDK clients of one backend.
type clients struct {
	instances *compute.InstancesClient
	firewalls *compute.FirewallsClient
	zoneOps   *compute.ZoneOperationsClient
	globalOps *compute.GlobalOperationsClient
	images    *compute.MachineImagesClient
}

// New validates cfg and returns a backend. It makes no request and
// resolves no credentials.
func New(cfg Config, rt provider.Runtime) (*Backend, error) {
	cfg, err := cfg.normalize()
	if err != nil {
		return nil, err
	}
	return &Backend{cfg: cfg, rt: rt.WithDefaults()}, nil
}

// Spec describes the provider.
func (b *Backend) Spec() provider.Spec { return spec.Clone() }

func (b *Backend) String() string {
	return fmt.Sprintf("gcp backend (project %s, zones %v, %s, %s)", b.cfg.Project, b.cfg.Zones, b.cfg.MachineType, b.cfg.Market)
}

// clients returns the SDK clients, making them on first use. With an
// Endpoint (a fake or a compatible service) requests go unauthenticated
// through the runtime's HTTP client; otherwise the SDK finds Application
// Default Credentials.
func (b *Backend) clients(ctx context.Context) (*clients, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.api != nil {
		return b.api, nil
	}
	var opts []option.ClientOption
	if b.cfg.Endpoint != "" {
		opts = append(opts, option.WithEndpoint(b.cfg.Endpoint), option.WithoutAuthentication(), option.WithHTTPClient(b.rt.HTTPClient))
	}
	opts = append(opts, option.WithUserAgent("crabbox"))
	opts = append(opts, b.cfg.ClientOptions...)
	var c clients
	var err error
	if c.instances, err = compute.NewInstancesRESTClient(ctx, opts...); err != nil {
		return nil, credentialsError(err)
	}
	if c.firewalls, err = compute.NewFirewallsRESTClient(ctx, opts...); err != nil {
		c.instances.Close()
		return nil, credentialsError(err)
	}
	if c.zoneOps, err = compute.NewZoneOperationsRESTClient(ctx, opts...); err != nil {
		c.instances.Close()
		c.firewalls.Close()
		return nil, credentialsError(err)
	}
	if c.globalOps, err = compute.NewGlobalOperationsRESTClient(ctx, opts...); err != nil {
		c.instances.Close()
		c.firewalls.Close()
		c.zoneOps.Close()
		return nil, credentialsError(err)
	}
	if c.images, err = compute.NewMachineImagesRESTClient(ctx, opts...); err != nil {
		c.instances.Close()
		c.firewalls.Close()
		c.zoneOps.Close()
		c.globalOps.Close()
		return nil, credentialsError(err)
	}
	b.api = &c
	return b.api, nil
}

// Close releases the SDK clients' connections. The backend makes new ones
// if it is used again.
func (b *Backend) Close() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.api == nil {
		return nil
	}
	c := b.api
	b.api = nil
	for _, cl := range []interface{ Close() error }{c.instances, c.firewalls, c.zoneOps, c.globalOps, c.images} {
		_ = cl.Close()
	}
	return nil
}

func credentialsError(err error) error {
	return fmt.Errorf("gcp provider: set up the Compute Engine client (Application Default Credentials: GOOGLE_APPLICATION_CREDENTIALS or `gcloud auth application-default login`): %w: %w",
		provider.ErrUnauthenticated, err)
}
