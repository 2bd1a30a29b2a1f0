// Package local is crabbox's embedded default provider: a box on this
// machine, served by crabbox's own SSH server on 127.0.0.1.
//
// Every lease gets a private directory <Root>/<leaseID>/ holding the
// provider's record (lease.json), the box's own host key, the work root, and
// proc.json, naming the process that set the lease up and then the one
// serving its box (so a box is stopped, and a dead process's leftovers
// recognised, even when the record is unreadable).
// The box accepts only the lease key, for the current user, and its host key
// is returned with the lease, so the first connection is already strict.
//
// A box is served either in-process, by a goroutine of the Backend (the
// default: library users and tests need no binary), or, when Config.Agent is
// set, by a detached `<Agent> agent --lease-dir DIR` process that outlives
// the program that acquired it (the CLI's `crabbox warmup`). Either way the
// box stops serving and removes its directory when it is released or when
// its expiry passes, without anyone running cleanup.
//
// The backend makes native checkpoints (provider.NativeForkBackend and
// provider.NativeRestoreBackend): a checkpoint is a copy of a box's work
// root under <Root>/checkpoints/<checkpointID>/, cloned file by file
// where the filesystem allows (reflinks); a fork is a new box whose work
// root is a copy of it, and a restore swaps a copy in for a running box's
// work root. A local box shares this machine's installed software, so
// only the work root is saved.
package local

import (
	"errors"
	"path/filepath"

	"github.com/crabbox-dev/crabbox/provider"
)

// Name is the provider's registered name.
const Name = "local"

// Config is the local provider's typed configuration.
type Config struct {
	// Root is the directory holding one directory per lease.
	Root string
	// Agent is the program run as `<Agent> agent --lease-dir DIR` to serve
	// each box out of process, so that leases outlive this process. Empty
	// means boxes are served in-process and end with Backend.Close.
	Agent string
}

var spec = provider.Spec{
	Name:        Name,
	Description: "a box on this machine, served by crabbox's own SSH server on 127.0.0.1",
	Kind:        provider.KindSSHLease,
	Targets:     []provider.Target{provider.TargetLinux, provider.TargetMacOS},
	Features: []provider.Feature{
		provider.FeatureSSH, provider.FeaturePinnedHostKey, provider.FeatureSelfExpiry,
		provider.FeatureCleanup, provider.FeatureDoctor, provider.FeaturePTY,
		provider.FeatureCheckpoint, provider.FeatureFork, provider.FeatureRestore,
	},
	// A coordinator can serve local boxes: they live on the coordinator's
	// machine, which makes a coordinator on loopback work with no cloud.
	Coordinator: provider.CoordinatorSupported,
	Options: []provider.Option{
		{
			Name: "root", Flag: "local-root",
			Help:    "directory for local leases (default: the local directory under crabbox's state directory)",
			Locates: true,
		},
		{
			Name: "agent", Flag: "local-agent",
			Help: "program run as \"PROGRAM agent --lease-dir DIR\" to serve leases so they outlive this process (default: serve in-process)",
		},
	},
}

// Provider is the registered local provider.
type Provider struct{}

func init() { provider.Register(Provider{}) }

// Spec describes the local provider.
func (Provider) Spec() provider.Spec {
	return spec.Clone()
}

// Configure parses cfg (already merged with the Spec's defaults) and returns
// a Backend. An empty root means rt.StateDir/local.
func (Provider) Configure(cfg provider.Config, rt provider.Runtime) (provider.Backend, error) {
	c := Config{Root: cfg["root"], Agent: cfg["agent"]}
	if c.Root == "" {
		if rt.StateDir == "" {
			return nil, errors.New("local provider: no root directory: set root (--local-root) or give the runtime a state directory")
		}
		c.Root = filepath.Join(rt.StateDir, Name)
	}
	return New(c, rt)
}

var (
	_ provider.Provider             = Provider{}
	_ provider.SSHLeaseBackend      = (*Backend)(nil)
	_ provider.CleanupBackend       = (*Backend)(nil)
	_ provider.NativeForkBackend    = (*Backend)(nil)
	_ provider.NativeRestoreBackend = (*Backend)(nil)
)
