// Package crabboxtest ties crabbox boxes to Go tests.
//
// Box leases a box for one test and releases it when the test ends;
// Main leases one box for a whole test binary, from TestMain; Run and
// RunExitCode run a command on a box. They fail the test (t.Fatal) on
// any crabbox error, so a test reads as what it checks:
//
//	func TestBuild(t *testing.T) {
//		box := crabboxtest.Box(t)
//		crabboxtest.Run(t, box, "go", "build", "./...")
//	}
//
// or, with one box for the package:
//
//	var box *crabbox.Lease
//
//	func TestMain(m *testing.M) { crabboxtest.Main(m, &box) }
//
//	func TestBuild(t *testing.T) { crabboxtest.Run(t, box, "go", "build", "./...") }
//
// By default a box comes from the embedded local provider (nothing to
// install; importing this package registers it), its leases are recorded in a state directory of its own that
// is removed afterwards, and the git checkout holding the test's working
// directory (the package directory under go test) is synced to it, so
// that Run runs in the box's copy of the package directory (of the
// directory synced, with WithSyncDir). Options
// choose another provider (WithClientOptions), shape the lease
// (WithAcquire), and choose what is synced (WithSyncDir, WithSyncOptions,
// WithoutSync).
package crabboxtest

import (
	"go.uber.org/goleak"

	"github.com/crabbox-dev/crabbox"
	_ "github.com/crabbox-dev/crabbox/providers/local" // the default provider
)

// Option configures Box, Main and Start.
type Option func(*config)

type config struct {
	client  []crabbox.Option
	acquire crabbox.AcquireOptions
	syncDir string // "" syncs nothing
	sync    crabbox.SyncOptions
	leak    []goleak.Option
}

func newConfig(opts []Option) config {
	c := config{syncDir: "."}
	for _, opt := range opts {
		opt(&c)
	}
	return c
}

// WithClientOptions configures the box's client, for example
// crabbox.WithProvider and crabbox.WithProviderConfig for a box that is
// not local, or crabbox.WithStateDir to keep the lease records somewhere
// known (by default they go to a temporary directory).
func WithClientOptions(opts ...crabbox.Option) Option {
	return func(c *config) { c.client = append(c.client, opts...) }
}

// WithAcquire shapes the lease (provider, TTL, idle timeout, labels).
func WithAcquire(opts crabbox.AcquireOptions) Option {
	return func(c *config) { c.acquire = opts }
}

// WithSyncDir syncs the checkout holding dir instead of the one holding
// the working directory, and Run runs in dir's copy on the box. A
// directory outside git is synced as it is.
func WithSyncDir(dir string) Option {
	return func(c *config) { c.syncDir = dir }
}

// WithSyncOptions sets the options of the sync (excludes, guardrails).
func WithSyncOptions(opts crabbox.SyncOptions) Option {
	return func(c *config) { c.sync = opts }
}

// WithoutSync syncs nothing: the box starts empty, and Run runs in an
// empty directory (see Run).
func WithoutSync() Option {
	return func(c *config) { c.syncDir = "" }
}

// WithLeakOptions are passed to goleak when Main looks for goroutines
// the tests leaked, for example goleak.IgnoreTopFunction for a
// background goroutine that is meant to outlive them.
func WithLeakOptions(opts ...goleak.Option) Option {
	return func(c *config) { c.leak = append(c.leak, opts...) }
}
