// Package aws is the Amazon EC2 provider: each lease is one EC2 instance
// (spot by default, on-demand when EC2 has no spot capacity) that a
// cloud-init bootstrap turns into a crabbox box.
//
// # Acquire
//
// Acquire runs these steps, and on any failure, or when its context ends,
// deletes what it created so far, newest first (cloud.Rollback):
//
//  1. key: import the lease's public key as the key pair
//     "crabbox-<lease>", tagged; rollback deletes that exact KeyPairId.
//  2. security group: find the group "crabbox-ssh-<hash>" in the default
//     VPC, which opens the SSH ports only to the configured CIDR, or create
//     it. A group of that name without crabbox's tags is never adopted.
//     Rollback deletes a group this acquire created once the instance is
//     terminated (a group another lease uses meanwhile is left).
//  3. create: RunInstances with ClientToken = lease ID (an answer lost on
//     the way is harmless: a retry gets the same instance), the image
//     (newest Canonical Ubuntu 24.04 LTS for the architecture unless
//     configured), the bootstrap as user data, the ownership tags on the
//     instance and its volume, and InstanceInitiatedShutdownBehavior
//     terminate, so the bootstrap's self-destruct timer terminates the
//     box at its TTL. Rollback terminates every instance tagged with the
//     lease, found by tag, so it works even when the answer was lost.
//  4. address: wait until the instance runs with a public address.
//  5. ssh: wait until sshd answers with the host key the client made and
//     put into the user data (cloud.WaitForSSH), on 2222, else 22.
//  6. label: tag the instance ready, with the SSH port that answered.
//
// # Ownership, release and cleanup
//
// Instances, volumes and key pairs carry the ownership tags of
// cloud.NewLabels, which include the box's host public key, so Resolve and
// List need no local state. Release, Resolve, Touch, List and Cleanup find
// instances only by those tags (crabbox=true, provider=aws, lease=<id>),
// never by name, in every configured region. Cleanup deletes an instance
// only when cloud.DecideCleanup says so and the caller holds a claim for
// its lease, and decides again on the freshly re-read instance just
// before terminating it.
//
// # Checkpoints
//
// Native checkpoints are AMIs. CreateCheckpoint makes an AMI of the
// lease's instance with CreateImage (NoReboot: the box keeps running;
// files written during the save may be caught half-way) and waits until it is available. The AMI and the EBS
// snapshot of its root volume carry the ownership tags (crabbox=true,
// created_by=crabbox, provider=aws, owner), the checkpoint and
// source_lease tags and the caller's labels; their name is
// "crabbox-<checkpoint>". ListCheckpoints finds AMIs the account owns by
// those tags, and DeleteCheckpoint deregisters the AMI and then deletes
// the snapshots tagged with its checkpoint, which AWS would otherwise
// keep (and bill).
//
// Fork is Acquire booting the checkpoint's AMI instead of Ubuntu: the
// bootstrap runs again on the copy, so the new box accepts only the new
// lease key and presents a new host key.
//
// Restore rebuilds the box: it launches a replacement instance of the
// same lease from the AMI, with a fresh bootstrap (RestoreRequest's key, a
// new host key, the self-destruct timer armed for what is left of the
// lease's TTL), waits for its SSH, then terminates the old instance. EC2's
// own in-place restore (CreateReplaceRootVolumeTask) reboots the instance
// without running the bootstrap again, so the box would come back with the
// checkpoint's keys and without its self-destruct timer. A rebuilt box has
// a new address and host key, which the returned target carries. While the
// replacement boots, the lease has two instances (Resolve answers
// provider.ErrConflict); if the restore fails, the replacement is
// terminated and the old instance is left as it was.
//
// # Credentials
//
// Credentials come from the AWS SDK's standard chain (environment,
// shared files under the configured profile, SSO, web identity, instance
// role) and never appear in options, arguments, logs, errors or claims.
package aws

import (
	"context"
	"fmt"
	"net/http"

	awssdk "github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"

	"github.com/crabbox-dev/crabbox/provider"
	"github.com/crabbox-dev/crabbox/providers/aws/awsspec"
	"github.com/crabbox-dev/crabbox/providers/internal/cloud"
)

// Name is the provider's registered name.
const Name = awsspec.Name

// Provider is the registered "aws" provider. Its zero value is ready to use.
type Provider struct{}

var _ provider.Provider = Provider{}

func init() { provider.Register(Provider{}) }

// Spec describes the provider.
func (Provider) Spec() provider.Spec { return spec.Clone() }

// Configure parses cfg and returns the backend. It reads the AWS SDK's
// local configuration but contacts nothing.
func (Provider) Configure(cfg provider.Config, rt provider.Runtime) (provider.Backend, error) {
	c, err := ParseConfig(cfg)
	if err != nil {
		return nil, err
	}
	return New(c, rt)
}

// Backend is the EC2 lease backend.
type Backend struct {
	cfg     Config
	rt      provider.Runtime
	sdk     awssdk.Config
	clients map[string]*ec2.Client // by region
}

var (
	_ provider.SSHLeaseBackend = (*Backend)(nil)
	_ provider.CleanupBackend  = (*Backend)(nil)
)

// New validates cfg and returns a backend. It reads the AWS SDK's local
// configuration (profile, region) but resolves no credentials and makes
// no request. EC2 calls go through rt.HTTPClient when it has a Transport
// of its own, else through the SDK's HTTP client (which honours
// AWS_CA_BUNDLE and the proxy environment).
func New(cfg Config, rt provider.Runtime) (*Backend, error) {
	cfg, err := cfg.normalize()
	if err != nil {
		return nil, err
	}
	// Only an HTTP client with a transport of its own (a fake, a proxy)
	// replaces the SDK's, which honours AWS_CA_BUNDLE.
	var httpClient *http.Client
	if rt.HTTPClient != nil && rt.HTTPClient.Transport != nil {
		httpClient = rt.HTTPClient
	}
	rt = rt.WithDefaults()
	sdk, err := loadSDKConfig(context.Background(), cfg, httpClient, rt.Logger)
	if err != nil {
		return nil, err
	}
	if len(cfg.Regions) == 0 {
		cfg.Regions = []string{DefaultRegion}
		if sdk.Region != "" {
			if !regionPattern.MatchString(sdk.Region) {
				return nil, fmt.Errorf("aws provider: the AWS SDK configuration's region %q (AWS_REGION or the profile) is not an AWS region name", sdk.Region)
			}
			cfg.Regions = []string{sdk.Region}
		}
	}
	if cfg.Owner == "" {
		cfg.Owner = cloud.CurrentUser()
	}
	return &Backend{cfg: cfg, rt: rt, sdk: sdk, clients: newEC2Clients(sdk, cfg.Regions, cfg.Endpoint)}, nil
}

// Spec describes the provider.
func (b *Backend) Spec() provider.Spec { return spec.Clone() }

// Regions are the regions the backend works in; boxes are created in the
// first.
func (b *Backend) Regions() []string { return append([]string(nil), b.cfg.Regions...) }

func (b *Backend) String() string {
	return fmt.Sprintf("aws backend (regions %v, %s, %s)", b.cfg.Regions, b.cfg.InstanceType, b.cfg.Market)
}
