// Package cloudtest helps test cloud providers against fake clouds.
//
// A fake cloud API (an httptest server speaking the cloud's JSON) boots a
// Box from the user data its create call receives: crabbox's own SSH
// server on 127.0.0.1, accepting exactly the lease key from the user data
// and presenting the host key the client injected there, with the user
// data's work root as its working directory. So a fake cloud's server is
// really reachable, and the whole acquire, sync, run and release path runs
// against it.
//
// A Fleet hands out fake public addresses (from the documentation ranges
// 192.0.2.0/24, 198.51.100.0/24 and 203.0.113.0/24, never dialled) and
// maps each address and SSH port of the user data to where its box really
// listens: providers take Fleet.MapAddress as their address mapper.
//
// A loopback fleet (NewLoopbackFleet) needs no mapper, for a provider that
// runs in another process (its provider program, crabbox-provider-<name>):
// its addresses are distinct loopback addresses (127.a.b.c), and each box
// listens on its address at the SSH port of its user data, as a real box
// does on its public address.
package cloudtest

import (
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"go.uber.org/goleak"

	"github.com/crabbox-dev/crabbox/internal/sshserver"
	"github.com/crabbox-dev/crabbox/lease"
	"github.com/crabbox-dev/crabbox/providers/internal/cloud"
)

// Box is a fake cloud box serving SSH on 127.0.0.1 as its user data says.
type Box struct {
	// Bootstrap is what the user data asked for.
	Bootstrap cloud.Bootstrap
	// Host and Port are where the box really listens.
	Host string
	Port int

	// disk is the directory holding the box's files (see Fleet.UseDisks);
	// empty when its files are the host's.
	disk string

	srv    *sshserver.Server
	served chan struct{}
	err    error // Serve's result, set before served is closed
	once   sync.Once
}

// StartBox parses userData (rendered by cloud.Bootstrap) and serves the
// box it describes on a fresh loopback port. It creates the work root if
// it does not exist. log may be nil. Close the box to stop it.
func StartBox(userData string, log *slog.Logger) (*Box, error) {
	return startBox(userData, log, boxOptions{})
}

// boxOptions are the settings of a fleet's box beyond its user data.
type boxOptions struct {
	// banner is sshd's banner; empty for none.
	banner string
	// host is where the box listens, at the first of the user data's SSH
	// ports it can listen on; a fresh port of 127.0.0.1 when empty.
	host string
	// disk, if set, holds the box's files (see Fleet.UseDisks): the
	// paths of mounts and of the work root are rewritten to it by the
	// shell script at shell.
	disk, shell string
	mounts      []string
}

// startBox is StartBox with the options o.
func startBox(userData string, log *slog.Logger, o boxOptions) (*Box, error) {
	bs, err := cloud.ParseUserData(userData)
	if err != nil {
		return nil, fmt.Errorf("fake box: %w", err)
	}
	authorized, err := lease.ParsePublicKey(bs.AuthorizedKey)
	if err != nil {
		return nil, fmt.Errorf("fake box: %w", err)
	}
	hostKey, err := sshSigner(bs.HostKey)
	if err != nil {
		return nil, err
	}
	dir, shell := bs.WorkRoot, ""
	if o.disk != "" {
		dir = filepath.Join(o.disk, filepath.FromSlash(bs.WorkRoot))
		if shell, err = writeDiskShell(o.shell, o.disk, append([]string{bs.WorkRoot}, o.mounts...)); err != nil {
			return nil, fmt.Errorf("fake box: %w", err)
		}
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("fake box: work root: %w", err)
	}
	user := bs.User
	if user == "" {
		user = cloud.DefaultUser
	}
	srv, err := sshserver.New(sshserver.Config{
		HostKey: hostKey, AuthorizedKey: authorized, User: user, Dir: dir, Shell: shell,
		Env: boxEnv(os.Environ()), Logger: log, Banner: o.banner,
		// As the bootstrap's sshd: local forwarding only (crabbox forward).
		ForwardTCP: true,
	})
	if err != nil {
		return nil, fmt.Errorf("fake box: %w", err)
	}
	l, err := listen(o.host, portsOf(bs))
	if err != nil {
		return nil, fmt.Errorf("fake box: %w", err)
	}
	addr := l.Addr().(*net.TCPAddr)
	b := &Box{Bootstrap: bs, Host: addr.IP.String(), Port: addr.Port, disk: o.disk, srv: srv, served: make(chan struct{})}
	go func() {
		defer close(b.served)
		b.err = srv.Serve(l)
	}()
	return b, nil
}

// listen listens on a fresh port of 127.0.0.1 when host is empty, else on
// host at the first of ports that is free.
func listen(host string, ports []int) (net.Listener, error) {
	if host == "" {
		return net.Listen("tcp", "127.0.0.1:0")
	}
	var errs []error
	for _, p := range ports {
		l, err := net.Listen("tcp", net.JoinHostPort(host, fmt.Sprint(p)))
		if err == nil {
			return l, nil
		}
		errs = append(errs, err)
	}
	return nil, fmt.Errorf("listen on %s at none of the SSH ports %v: %w", host, ports, errors.Join(errs...))
}

// Addr is the box's real address, host:port.
func (b *Box) Addr() string { return net.JoinHostPort(b.Host, fmt.Sprint(b.Port)) }

// Close stops the box: its listener, connections and commands. It waits
// for them and may be called more than once.
func (b *Box) Close() error {
	var err error
	b.once.Do(func() {
		err = b.srv.Close()
		<-b.served
		err = errors.Join(err, b.err)
	})
	return err
}

// boxEnv is the base environment of commands on a fake box: the basics of
// a login, never the test process's own variables.
func boxEnv(environ []string) []string {
	keep := map[string]bool{"HOME": true, "USER": true, "LOGNAME": true, "PATH": true, "LANG": true, "TMPDIR": true}
	var env []string
	for _, kv := range environ {
		if name, _, ok := strings.Cut(kv, "="); ok && keep[name] {
			env = append(env, kv)
		}
	}
	return env
}

// Fleet is the set of boxes of one fake cloud, by fake public address. It
// is safe for concurrent use (fake API handlers boot and halt boxes).
type Fleet struct {
	log *slog.Logger

	mu      sync.Mutex
	boxes   map[string]*Box
	blocked map[string]bool // "ip:port" that refuse connections
	next    int
	closed  string // an address where nothing listens
	banner  string // served by boxes booted from now on (FailBootstrap)

	loopback bool            // addresses are loopback addresses, boxes listen there
	issued   map[string]bool // the loopback addresses handed out

	disks *diskSet // nil: boxes' files are the host's
}

// IgnoreGoroutines are the goleak options for the goroutines of a fake
// cloud, which belong to the test and not to the backend under test and so
// outlive the backend's Close: the boxes' SSH servers, the fake API's
// httptest server with its connections, and the idle connections that the
// HTTP client the test hands the backend (in its Runtime) keeps to it.
// providertest.Harness.IgnoreGoroutines takes them.
func IgnoreGoroutines() []goleak.Option {
	return []goleak.Option{
		goleak.IgnoreAnyFunction("github.com/crabbox-dev/crabbox/providers/internal/cloud/cloudtest.startBox.func1"),
		goleak.IgnoreAnyFunction("net/http/httptest.(*Server).goServe.func1"),
		goleak.IgnoreAnyFunction("net/http.(*conn).serve"),
		goleak.IgnoreAnyFunction("net/http.(*persistConn).readLoop"),
		goleak.IgnoreAnyFunction("net/http.(*persistConn).writeLoop"),
	}
}

// NewFleet returns an empty fleet whose boxes are all stopped when the
// test ends.
func NewFleet(t testing.TB) *Fleet {
	t.Helper()
	f := &Fleet{boxes: map[string]*Box{}, blocked: map[string]bool{}, log: slog.New(slog.DiscardHandler)}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f.closed = l.Addr().String()
	l.Close()
	t.Cleanup(func() {
		if err := f.Close(); err != nil {
			t.Errorf("stop fake boxes: %v", err)
		}
	})
	return f
}

// NewLoopbackFleet returns an empty loopback fleet, whose boxes are all
// stopped when the test ends: NewAddress hands out distinct, random
// addresses of 127.0.0.0/8 other than 127.0.0.1, and a box listens on its
// address at the first SSH port of its user data that is free there (2222
// by default), so a provider in another process reaches it without an
// address mapper. Block has no effect on it. Call CheckLoopback first to
// skip where the system routes only 127.0.0.1.
func NewLoopbackFleet(t testing.TB) *Fleet {
	t.Helper()
	f := NewFleet(t)
	f.loopback, f.issued = true, map[string]bool{}
	return f
}

// CheckLoopback reports whether this system serves every address of
// 127.0.0.0/8 on loopback, as Linux does (macOS and Windows serve only
// 127.0.0.1 unless configured), which a loopback fleet needs.
func CheckLoopback() error {
	l, err := net.Listen("tcp", "127.0.0.2:0")
	if err != nil {
		return fmt.Errorf("loopback fleet: this system does not serve 127.0.0.2 on loopback: %w", err)
	}
	return l.Close()
}

var fakeNets = []string{"192.0.2.", "198.51.100.", "203.0.113."}

// NewAddress returns a fresh fake public IPv4 address with no box yet.
func (f *Fleet) NewAddress() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.newAddressLocked()
}

func (f *Fleet) newAddressLocked() string {
	if f.loopback {
		// Random, so that concurrent test processes' boxes do not meet at
		// one address and port.
		for {
			ip := fmt.Sprintf("127.%d.%d.%d", rand.IntN(256), rand.IntN(256), 2+rand.IntN(253))
			if !f.issued[ip] {
				f.issued[ip] = true
				return ip
			}
		}
	}
	n := f.next
	f.next++
	return fmt.Sprintf("%s%d", fakeNets[(n/254)%len(fakeNets)], n%254+1)
}

// Boot starts the box userData describes at the fake address ip
// (NewAddress), replacing any box there. With disks (UseDisks), the box
// starts with an empty disk.
func (f *Fleet) Boot(ip, userData string) error { return f.boot(ip, userData, "") }

// boot is Boot, with the new box's disk a copy of the image named image
// when that is not empty.
func (f *Fleet) boot(ip, userData, image string) error {
	f.mu.Lock()
	o := boxOptions{banner: f.banner}
	if f.loopback {
		o.host = ip
	}
	d := f.disks
	f.mu.Unlock()
	if d != nil {
		var err error
		if o.disk, o.shell, err = d.newDisk(image); err != nil {
			return err
		}
		o.mounts = d.mounts
	} else if image != "" {
		return fmt.Errorf("boot %s from image %s: the fleet has no disks (UseDisks)", ip, image)
	}
	if old := f.Box(ip); old != nil && o.host != "" {
		// The new box listens where the old one did.
		if err := f.Halt(ip); err != nil {
			return err
		}
	}
	b, err := startBox(userData, f.log, o)
	if err != nil {
		return errors.Join(err, removeDisk(o.disk))
	}
	f.mu.Lock()
	old := f.boxes[ip]
	f.boxes[ip] = b
	f.mu.Unlock()
	if old != nil {
		return errors.Join(old.Close(), removeDisk(old.disk))
	}
	return nil
}

// FailBootstrap makes the boxes booted from now on boxes whose bootstrap
// failed at step after printing output: as the bootstrap's failure path
// makes sshd do, they serve SSH with the user data's host key and a banner
// saying so (cloud.BootstrapFailureBanner).
func (f *Fleet) FailBootstrap(step, output string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.banner = cloud.BootstrapFailureBanner(step, output)
}

// Halt stops the box at ip, if any.
func (f *Fleet) Halt(ip string) error {
	f.mu.Lock()
	b := f.boxes[ip]
	delete(f.boxes, ip)
	f.mu.Unlock()
	if b == nil {
		return nil
	}
	return errors.Join(b.Close(), removeDisk(b.disk))
}

// Box returns the box at ip, or nil.
func (f *Fleet) Box(ip string) *Box {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.boxes[ip]
}

// Running returns the addresses of the running boxes, sorted.
func (f *Fleet) Running() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var ips []string
	for ip := range f.boxes {
		ips = append(ips, ip)
	}
	slices.Sort(ips)
	return ips
}

// Block makes port of the box at ip refuse connections, as a firewall
// would (for testing the fallback port); Unblock undoes it.
func (f *Fleet) Block(ip string, port int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.blocked[net.JoinHostPort(ip, fmt.Sprint(port))] = true
}

// Unblock undoes Block.
func (f *Fleet) Unblock(ip string, port int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.blocked, net.JoinHostPort(ip, fmt.Sprint(port)))
}

// MapAddress maps a box's public address and one of its user data's SSH
// ports to where the box really listens. Any other address or port, a
// blocked port or a halted box maps to a loopback port where nothing
// listens.
func (f *Fleet) MapAddress(host string, port int) (string, int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	b := f.boxes[host]
	if b != nil && slices.Contains(portsOf(b.Bootstrap), port) && !f.blocked[net.JoinHostPort(host, fmt.Sprint(port))] {
		return b.Host, b.Port
	}
	h, p, _ := net.SplitHostPort(f.closed)
	var n int
	fmt.Sscan(p, &n)
	return h, n
}

func portsOf(bs cloud.Bootstrap) []int {
	if len(bs.Ports) == 0 {
		return cloud.DefaultPorts()
	}
	return bs.Ports
}

// Close stops every box.
func (f *Fleet) Close() error {
	f.mu.Lock()
	boxes := f.boxes
	f.boxes = map[string]*Box{}
	f.mu.Unlock()
	var errs []error
	for _, b := range boxes {
		errs = append(errs, b.Close())
	}
	return errors.Join(errs...)
}

// Store opens the lease store in stateDir (a client's StateDir), failing
// the test if it cannot.
func Store(t testing.TB, stateDir string) *lease.Store {
	t.Helper()
	s, err := lease.OpenStore(stateDir)
	if err != nil {
		t.Fatal(err)
	}
	return s
}
