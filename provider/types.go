package provider

import (
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"time"
)

// AcquireRequest asks an SSH-lease backend for a new box. The library has
// already chosen the lease identity and made the lease key pair.
type AcquireRequest struct {
	LeaseID string
	Slug    string
	// PublicKey is the lease key in authorized_keys format: the only key the
	// box must accept.
	PublicKey   string
	TTL         time.Duration
	IdleTimeout time.Duration
	CreatedAt   time.Time
	ExpiresAt   time.Time
	Keep        bool
	// Labels are extra labels from the caller, set on the box where the
	// provider supports labels.
	Labels map[string]string
}

// LeaseTarget is a neutral description of a leased box and how to reach it
// over SSH. It is not any cloud's JSON shape.
type LeaseTarget struct {
	LeaseID  string
	Slug     string
	Provider string
	// CloudID is the provider's own identifier of the box, if any.
	CloudID string
	Host    string
	Port    int
	User    string
	// KeyFile is a private key file the box requires (bring-your-own hosts).
	// Empty means the lease key made by the library.
	KeyFile string
	// HostKey is the box's public host key in authorized_keys format. Empty
	// means unknown: the library trusts the first key it sees and pins it.
	HostKey string
	// WorkRoot is the directory under which the library creates the lease's
	// work directory (<WorkRoot>/<LeaseID>/<repo>).
	WorkRoot  string
	State     string
	Labels    map[string]string
	CreatedAt time.Time
	ExpiresAt time.Time
	// AccessKeys are public keys (authorized_keys form) the box must accept
	// besides the lease key: the access key of the coordinator brokering
	// the lease, with which it reaches the box for the users the lease is
	// shared with, the web terminal and port previews. The library installs
	// them, with the lease key, on its first connection to the box.
	AccessKeys []string
}

// ResolveRequest finds a lease by ID (cbx_...) or slug.
type ResolveRequest struct {
	ID string
}

// ListRequest lists a provider's crabbox leases.
type ListRequest struct{}

// TouchRequest records activity on a lease.
type TouchRequest struct {
	Lease     LeaseTarget
	Now       time.Time
	ExpiresAt time.Time
}

// ReleaseRequest ends a lease.
type ReleaseRequest struct {
	Lease LeaseTarget
}

// CleanupRequest asks a backend to sweep expired boxes.
type CleanupRequest struct {
	DryRun bool
	Now    time.Time
	// Claimed reports whether the caller holds a claim for the lease ID.
	// Boxes without a claim belong to someone else and are never deleted.
	Claimed func(leaseID string) bool
}

// CleanupDecision is what cleanup decided about one box, and why.
type CleanupDecision struct {
	LeaseID string
	Slug    string
	CloudID string
	Delete  bool
	Reason  string
	// Deleted is set when the box was actually deleted (never on dry run).
	Deleted bool
	// Err is set when the deletion was attempted and failed.
	Err error
}

// Check is one doctor check's outcome.
type Check struct {
	Name string `json:"name"`
	OK   bool   `json:"ok"`
	// Warn marks a check that passed with a warning (OK stays true):
	// crabbox works now, but Detail says what will go wrong soon.
	Warn   bool   `json:"warn,omitempty"`
	Detail string `json:"detail,omitempty"`
}

// LeaseView is a normalized view of a lease for delegated backends, list and
// status rendering.
type LeaseView struct {
	ID        string
	Slug      string
	Provider  string
	CloudID   string
	State     string
	Labels    map[string]string
	CreatedAt time.Time
	ExpiresAt time.Time
	// WorkRoot is, for a delegated backend with files, the absolute
	// slash-separated directory in the sandbox under which the library
	// keeps checkouts (<WorkRoot>/<repo>) and its sync state. Empty means
	// the provider's default is unknown; the library then uses "crabbox"
	// under the sandbox user's home, which Run's Dir makes absolute.
	WorkRoot string
}

// WarmupRequest prepares a delegated lease.
type WarmupRequest struct {
	LeaseID     string
	Slug        string
	TTL         time.Duration
	IdleTimeout time.Duration
	// ExpiresAt is min(now+TTL, now+IdleTimeout): when the sandbox should
	// end by itself unless it is touched.
	ExpiresAt time.Time
	Labels    map[string]string
}

// DelegatedRunRequest runs a command on a delegated backend.
type DelegatedRunRequest struct {
	LeaseID string
	Command []string
	Env     map[string]string
	// Dir is the absolute slash-separated directory in the sandbox to run
	// in, set when the library synced the checkout there (a
	// DelegatedFileBackend). Empty means the backend syncs Root itself and
	// runs in Workdir, relative to its copy of the checkout.
	Dir string
	// Workdir is the slash-separated directory, relative to the checkout,
	// to run in; Root is the local checkout. Both are set only for backends
	// without files, which sync Root themselves.
	Workdir string
	Root    string
	// Stdin, when set, is the command's standard input: a backend with
	// FeatureStdin copies it to the command as it is read and closes the
	// command's stdin at its end; nil means an empty stdin. The library
	// sets it only for backends that declare FeatureStdin. Run returns
	// when the command ends, without waiting for a Stdin that has not.
	Stdin  io.Reader
	Stdout io.Writer
	Stderr io.Writer
}

// DelegatedRunResult is the outcome of a delegated run.
type DelegatedRunResult struct {
	ExitCode int
}

// WriteFileRequest writes one file into a delegated lease's sandbox.
type WriteFileRequest struct {
	LeaseID string
	// Path is absolute and slash-separated.
	Path string
	Mode fs.FileMode
	Body io.Reader
	// Size is Body's length in bytes, or -1 when unknown.
	Size int64
}

// ReadFileRequest reads one file from a delegated lease's sandbox.
type ReadFileRequest struct {
	LeaseID string
	// Path is absolute and slash-separated.
	Path string
}

// DelegatedTouchRequest extends a delegated lease at the provider.
type DelegatedTouchRequest struct {
	ID        string
	Now       time.Time
	ExpiresAt time.Time
}

// StatusRequest asks for one delegated lease.
type StatusRequest struct {
	ID string
}

// StopRequest ends a delegated lease.
type StopRequest struct {
	ID string
}

// SSHLoginRequest asks an SSHLoginBackend for a login to a lease.
type SSHLoginRequest struct {
	Lease LeaseTarget
	// ValidFor is how long the connection is expected to need the login
	// to stay valid (zero: the provider's default).
	ValidFor time.Duration
}

// SSHLogin is where and as whom to connect to a lease, for one
// connection. User is a secret: never store, log or print it, and never
// pass it on a command line.
type SSHLogin struct {
	Host string
	Port int
	User string
	// ExpiresAt is when the login stops working; zero means unknown.
	ExpiresAt time.Time
}

// String hides the user name, so that formatting a login with %v or a
// logger never shows the secret.
func (l SSHLogin) String() string {
	return fmt.Sprintf("%s:%d (user hidden)", l.Host, l.Port)
}

// LogValue hides the user name from slog.
func (l SSHLogin) LogValue() slog.Value { return slog.StringValue(l.String()) }
