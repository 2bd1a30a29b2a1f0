// Package ssh is the "bring your own host" provider: leases on a machine the
// user already has and reaches over SSH.
//
// The provider provisions nothing. Acquiring a lease connects to the
// configured host with the user's own key file, checks that the host can run
// crabbox's work (a POSIX sh and tar), and creates the lease's work directory
// <WorkRoot>/<leaseID>. Releasing it removes that one directory and nothing
// else. The host's other files, users and keys are never touched; in
// particular the per-lease public key the library makes is not installed on
// the host, so the target names the user's key file instead (LeaseTarget.KeyFile).
//
// The provider keeps its own state under Runtime.StateDir/ssh: one JSON
// record per lease (leases/<leaseID>.json) and the pinned host keys
// (known_hosts, OpenSSH format). A host key is trusted on first use per
// host:port and pinned; a different key later is a hard error
// (*HostKeyChangedError) until the user removes the pin by hand.
//
// Each record carries the host, port, user, key file and work root it was
// acquired with, so Resolve, List, ReleaseLease and Cleanup act on every lease
// in the state directory, on whichever host it lives, whatever host is
// configured now.
package ssh

import (
	"errors"
	"fmt"
	"os"
	"os/user"
	"path"
	"path/filepath"
	"strings"
	"unicode"

	"github.com/crabbox-dev/crabbox/provider"
)

// Name is the provider's registered name.
const Name = "ssh"

// Defaults of the provider's options.
const (
	DefaultPort     = 22
	DefaultWorkRoot = "/work/crabbox"
)

// Config is the typed configuration of a bring-your-own SSH host.
type Config struct {
	// Host is the host name or IP address of the machine. Required.
	Host string
	// Port is the SSH port, 1-65535; 0 means DefaultPort.
	Port int
	// User is the login user; empty means the current OS user.
	User string
	// KeyFile is an unencrypted private key file the host accepts for User.
	// Required. A leading "~/" means the home directory.
	KeyFile string
	// WorkRoot is the absolute POSIX directory on the host under which lease
	// work directories are created; it must not be "/". Empty means
	// DefaultWorkRoot.
	WorkRoot string
}

// Provider is the registered "ssh" provider. Its zero value is ready to use.
type Provider struct{}

var _ provider.Provider = Provider{}

func init() { provider.Register(Provider{}) }

var spec = provider.Spec{
	Name:        Name,
	Aliases:     []string{"byo"},
	Description: "A host you already have, reached over SSH with your own key; crabbox only creates and removes lease directories under its work root.",
	Kind:        provider.KindSSHLease,
	Targets:     []provider.Target{provider.TargetLinux, provider.TargetMacOS},
	Features:    []provider.Feature{provider.FeatureSSH, provider.FeatureCleanup, provider.FeatureDoctor},
	Coordinator: provider.CoordinatorUnsupported,
	Options: []provider.Option{
		{Name: "host", Flag: "ssh-host", Help: "host name or IP address of your SSH host", Locates: true},
		{Name: "port", Flag: "ssh-port", Default: "22", Help: "SSH port of your host", Locates: true},
		{Name: "user", Flag: "ssh-user", Help: "login user on your host (default: the current user)", Locates: true},
		{Name: "key", Flag: "ssh-key", Help: "unencrypted private key file your host accepts", Locates: true},
		{Name: "work-root", Flag: "work-root", Default: DefaultWorkRoot, Help: "absolute directory on the box under which lease work directories are created", Locates: true},
	},
}

// Spec describes the provider.
func (Provider) Spec() provider.Spec { return spec.Clone() }

// Configure parses cfg into a Config and returns the backend. It contacts no
// host.
func (Provider) Configure(cfg provider.Config, rt provider.Runtime) (provider.Backend, error) {
	c, err := ParseConfig(cfg)
	if err != nil {
		return nil, err
	}
	return New(c, rt)
}

// ParseConfig turns the provider's raw settings into a Config, applying the
// Spec's defaults and rejecting unknown keys. It does not validate values;
// New does.
func ParseConfig(cfg provider.Config) (Config, error) {
	raw, err := spec.Resolve(cfg)
	if err != nil {
		return Config{}, err
	}
	port, err := raw.Int("port")
	if err != nil {
		return Config{}, fmt.Errorf("ssh provider: %w", err)
	}
	return Config{
		Host:     strings.TrimSpace(raw["host"]),
		Port:     port,
		User:     strings.TrimSpace(raw["user"]),
		KeyFile:  raw["key"],
		WorkRoot: raw["work-root"],
	}, nil
}

// New validates cfg and returns a backend for the host it names. Host and
// key file may be empty: they are needed to acquire a lease, not to list,
// resolve or release the leases already recorded (each record names its own
// host and key).
// rt.StateDir is required: the provider keeps its lease records and pinned
// host keys under rt.StateDir/ssh. New reads nothing remote.
func New(cfg Config, rt provider.Runtime) (*Backend, error) {
	cfg, err := cfg.normalize()
	if err != nil {
		return nil, err
	}
	if rt.StateDir == "" {
		return nil, errors.New("ssh provider: the runtime's StateDir is required (the provider keeps its lease records and pinned host keys there)")
	}
	rt = rt.WithDefaults()
	dir := filepath.Join(rt.StateDir, Name)
	return &Backend{
		cfg:     cfg,
		clock:   rt.Clock,
		log:     rt.Logger,
		records: &records{dir: filepath.Join(dir, "leases"), lockPath: filepath.Join(dir, ".lock")},
		pins:    &pins{path: filepath.Join(dir, "known_hosts"), lockPath: filepath.Join(dir, ".lock")},
	}, nil
}

// normalize applies defaults and checks every field, naming the field and
// its option in errors.
func (c Config) normalize() (Config, error) {
	var err error
	if c.Host, err = checkHost(c.Host); err != nil {
		return Config{}, err
	}
	if c.Port == 0 {
		c.Port = DefaultPort
	}
	if c.Port < 1 || c.Port > 65535 {
		return Config{}, fmt.Errorf("ssh provider: port %d is out of range 1-65535 (option \"port\", flag --ssh-port)", c.Port)
	}
	if c.User == "" {
		if c.User, err = currentUser(); err != nil {
			return Config{}, err
		}
	}
	if strings.ContainsFunc(c.User, unsafeNameRune) || strings.Contains(c.User, "@") {
		return Config{}, fmt.Errorf("ssh provider: user %q contains whitespace, control characters or @ (option \"user\", flag --ssh-user)", c.User)
	}
	if c.KeyFile, err = checkKeyFile(c.KeyFile); err != nil {
		return Config{}, err
	}
	if c.WorkRoot == "" {
		c.WorkRoot = DefaultWorkRoot
	}
	if c.WorkRoot, err = checkWorkRoot(c.WorkRoot); err != nil {
		return Config{}, fmt.Errorf("ssh provider: %w (option \"work-root\", flag --work-root)", err)
	}
	return c, nil
}

func checkHost(host string) (string, error) {
	host = strings.TrimSpace(host)
	if strings.HasPrefix(host, "[") && strings.HasSuffix(host, "]") {
		host = host[1 : len(host)-1] // a bracketed IPv6 literal
	}
	switch {
	case host == "":
		return "", nil // required to acquire, not to manage existing leases
	case strings.ContainsFunc(host, unsafeNameRune) || strings.ContainsAny(host, "[]/"):
		return "", fmt.Errorf("ssh provider: host %q is not a host name or IP address (option \"host\", flag --ssh-host)", host)
	case strings.Contains(host, "@"):
		return "", fmt.Errorf("ssh provider: host %q contains a user; set the user separately (option \"user\", flag --ssh-user)", host)
	case strings.Count(host, ":") == 1:
		return "", fmt.Errorf("ssh provider: host %q contains a port; set the port separately (option \"port\", flag --ssh-port)", host)
	}
	return host, nil
}

func unsafeNameRune(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) }

func currentUser() (string, error) {
	u, err := user.Current()
	if err != nil || u.Username == "" {
		return "", fmt.Errorf("ssh provider: user is not set and the current user is unknown (option \"user\", flag --ssh-user): %v", err)
	}
	name := u.Username
	if i := strings.LastIndex(name, `\`); i >= 0 { // Windows: DOMAIN\name
		name = name[i+1:]
	}
	return name, nil
}

func checkKeyFile(p string) (string, error) {
	if p == "" {
		return "", nil // required to acquire, not to manage existing leases
	}
	if p == "~" || strings.HasPrefix(p, "~/") || strings.HasPrefix(p, `~\`) {
		home, err := os.UserHomeDir()
		if err != nil {
			return "", fmt.Errorf("ssh provider: key file %q: %w", p, err)
		}
		p = filepath.Join(home, p[1:])
	}
	abs, err := filepath.Abs(p)
	if err != nil {
		return "", fmt.Errorf("ssh provider: key file %q: %w", p, err)
	}
	fi, err := os.Stat(abs)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return "", fmt.Errorf("ssh provider: key file %s does not exist (option \"key\", flag --ssh-key)", abs)
	case err != nil:
		return "", fmt.Errorf("ssh provider: key file %s: %w (option \"key\", flag --ssh-key)", abs, err)
	case fi.IsDir():
		return "", fmt.Errorf("ssh provider: key file %s is a directory, not a private key file (option \"key\", flag --ssh-key)", abs)
	}
	return abs, nil
}

// checkWorkRoot accepts an absolute POSIX directory other than "/" and
// returns it cleaned. Backslashes and control characters are rejected so the
// path quotes safely for any remote login shell.
func checkWorkRoot(root string) (string, error) {
	switch {
	case !strings.HasPrefix(root, "/"):
		return "", fmt.Errorf("work root %q must be an absolute POSIX path, like %s", root, DefaultWorkRoot)
	case strings.ContainsFunc(root, unicode.IsControl) || strings.Contains(root, `\`):
		return "", fmt.Errorf("work root %q contains a backslash or control character", root)
	}
	clean := path.Clean(root)
	if clean == "/" {
		return "", fmt.Errorf("work root %q is the root directory; choose a directory of its own, like %s", root, DefaultWorkRoot)
	}
	return clean, nil
}

// checkAcquire reports what the configuration lacks to acquire a lease.
func (c Config) checkAcquire() error {
	switch {
	case c.Host == "":
		return errors.New("ssh provider: host is required (option \"host\", flag --ssh-host)")
	case c.KeyFile == "":
		return errors.New("ssh provider: key file is required (option \"key\", flag --ssh-key): crabbox logs in to a host it does not own with your key")
	}
	return nil
}
