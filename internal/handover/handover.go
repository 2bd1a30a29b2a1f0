// Package handover hands a ready pool's box to its new owner. A pool box is
// created with a pool key that only the coordinator can derive (PoolKey);
// a take connects to it with that key (Dial), checks that it was never
// used (Fresh) and makes the new owner's public key (and the coordinator's
// access key, AccessKey) the only keys it accepts (SetKeys). From then on
// the pool key no longer opens the box. A lease's owner makes its box
// accept the lease key and the access key with SetKeys too.
//
// Boxes are POSIX machines: OpenSSH's sshd (cloud boxes) or crabbox's own
// SSH server (local and docker boxes, the fake clouds of the tests).
package handover

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/hkdf"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/crabbox-dev/crabbox/internal/remote"
	"github.com/crabbox-dev/crabbox/internal/sshserver"
)

// Box is how to reach a box over SSH.
type Box struct {
	Host  string
	Ports []int // tried in order
	User  string
	// HostKey is the box's host key in authorized_keys form; "" accepts
	// the first key seen (which Dial returns, for the caller to pin).
	HostKey string
}

// handshakeTimeout bounds one connection attempt's TCP connect and SSH
// handshake when ctx allows longer: a box that accepts TCP and never
// speaks SSH must not hold a take.
const handshakeTimeout = 30 * time.Second

// Dial connects to b authenticated with signer, checking the host key. It
// tries b.Ports in order and returns the first client that logs in, with
// the host key seen (authorized_keys form, no newline). An error names
// every port's failure. ctx bounds every attempt; the client returned is
// not bound to it.
func Dial(ctx context.Context, b Box, signer ssh.Signer) (*ssh.Client, string, error) {
	if b.Host == "" || b.User == "" || len(b.Ports) == 0 || signer == nil {
		return nil, "", fmt.Errorf("dial box: host, ports, user and key are required (host %q, %d ports, user %q)", b.Host, len(b.Ports), b.User)
	}
	var pinned ssh.PublicKey
	if b.HostKey != "" {
		k, _, _, _, err := ssh.ParseAuthorizedKey([]byte(b.HostKey))
		if err != nil {
			return nil, "", fmt.Errorf("dial box %s: host key %q: %w", b.Host, b.HostKey, err)
		}
		pinned = k
	}
	var errs []error
	for _, port := range b.Ports {
		if port <= 0 || port > 65535 {
			errs = append(errs, fmt.Errorf("port %d: out of range", port))
			continue
		}
		c, seen, err := dial(ctx, b, port, signer, pinned)
		if err == nil {
			return c, strings.TrimSpace(string(ssh.MarshalAuthorizedKey(seen))), nil
		}
		errs = append(errs, fmt.Errorf("port %d: %w", port, err))
		if ctx.Err() != nil {
			break
		}
	}
	return nil, "", fmt.Errorf("connect to box %s as %s: %w", b.Host, b.User, errors.Join(errs...))
}

// dial makes one connection attempt on port.
func dial(ctx context.Context, b Box, port int, signer ssh.Signer, pinned ssh.PublicKey) (*ssh.Client, ssh.PublicKey, error) {
	addr := net.JoinHostPort(b.Host, strconv.Itoa(port))
	var seen ssh.PublicKey // set by the handshake, before NewClientConn returns
	cfg := &ssh.ClientConfig{
		User: b.User,
		Auth: []ssh.AuthMethod{ssh.PublicKeys(signer)},
		HostKeyCallback: func(_ string, _ net.Addr, key ssh.PublicKey) error {
			if pinned != nil && !bytes.Equal(key.Marshal(), pinned.Marshal()) {
				return fmt.Errorf("box answers with host key %s, want %s", ssh.FingerprintSHA256(key), ssh.FingerprintSHA256(pinned))
			}
			seen = key
			return nil
		},
	}
	if pinned != nil {
		cfg.HostKeyAlgorithms = hostKeyAlgorithms(pinned)
	}
	d := net.Dialer{Timeout: handshakeTimeout}
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, nil, err
	}
	_ = conn.SetDeadline(time.Now().Add(handshakeTimeout))
	stop := context.AfterFunc(ctx, func() { _ = conn.SetDeadline(time.Unix(1, 0)) })
	c, chans, reqs, err := ssh.NewClientConn(remote.QuickAck(conn), addr, cfg)
	if !stop() {
		if c != nil {
			_ = c.Close()
		}
		_ = conn.Close()
		return nil, nil, fmt.Errorf("ssh handshake: %w", context.Cause(ctx))
	}
	if err != nil {
		_ = conn.Close()
		return nil, nil, err
	}
	_ = conn.SetDeadline(time.Time{})
	return ssh.NewClient(c, chans, reqs), seen, nil
}

// hostKeyAlgorithms are the algorithms that make a server present a key
// of pinned's type: for an RSA key, the SHA-2 signatures first.
func hostKeyAlgorithms(pinned ssh.PublicKey) []string {
	if pinned.Type() == ssh.KeyAlgoRSA {
		return []string{ssh.KeyAlgoRSASHA512, ssh.KeyAlgoRSASHA256, ssh.KeyAlgoRSA}
	}
	return []string{pinned.Type()}
}

// ErrUsed says a box is not fresh: something is in its work root.
var ErrUsed = errors.New("box was used")

// freshListMax bounds how many entries of a used work root Fresh names.
const freshListMax = 5

// exitNotDir is the status of Fresh's script when the work root is not a
// directory.
const exitNotDir = 3

// Fresh returns nil when the box was never used for a lease: nothing in
// workRoot, or no workRoot at all. Otherwise it returns an error wrapping
// ErrUsed that names what it found (the first few entries), or another
// error when it could not tell (workRoot unreadable, the box gone, ctx
// done). workRoot must be an absolute path.
func Fresh(ctx context.Context, c *ssh.Client, workRoot string) error {
	if !strings.HasPrefix(workRoot, "/") {
		return fmt.Errorf("check the box is fresh: work root %q is not an absolute path", workRoot)
	}
	// ls -A lists every entry but . and ..; the listing is taken in full
	// first so that a failing ls is a failure, not an empty root.
	script := fmt.Sprintf(`d=%s
if [ ! -e "$d" ] && [ ! -L "$d" ]; then exit 0; fi
[ -d "$d" ] || exit %d
list=$(ls -A -- "$d") || exit 1
[ -z "$list" ] || printf '%%s\n' "$list" | head -n %d`, remote.Quote(workRoot), exitNotDir, freshListMax+1)
	out, err := run(ctx, c, script, nil)
	var exit *ssh.ExitError
	switch {
	case errors.As(err, &exit) && exit.ExitStatus() == exitNotDir:
		return fmt.Errorf("work root %s is not a directory: %w", workRoot, ErrUsed)
	case err != nil:
		return fmt.Errorf("check the box is fresh: list %s: %w", workRoot, err)
	}
	out = strings.TrimRight(out, "\n")
	if out == "" {
		return nil
	}
	entries := strings.Split(out, "\n")
	named := make([]string, 0, freshListMax+1)
	for i, e := range entries {
		if i == freshListMax {
			named = append(named, "...")
			break
		}
		named = append(named, strconv.Quote(e))
	}
	return fmt.Errorf("work root %s holds %s: %w", workRoot, strings.Join(named, ", "), ErrUsed)
}

// SetKey is SetKeys with one key.
func SetKey(ctx context.Context, c *ssh.Client, key ssh.PublicKey) error {
	return SetKeys(ctx, c, key)
}

// SetKeys makes keys the only keys the box's SSH user is accepted with,
// for new connections; c (and other open connections) stay open.
// crabbox's own SSH server does it on a SetKeysRequest (one key: the
// SetKeyRequest older servers know too); on any other server (OpenSSH)
// SetKeys replaces the user's ~/.ssh/authorized_keys atomically with
// exactly keys, one a line, and removes ~/.ssh/authorized_keys2. ctx
// bounds the work; should it end while the server has not answered, the
// server may still apply it.
func SetKeys(ctx context.Context, c *ssh.Client, keys ...ssh.PublicKey) error {
	if len(keys) == 0 || len(keys) > sshserver.MaxSetKeys {
		return fmt.Errorf("set the box's keys: %d keys given, want 1 to %d", len(keys), sshserver.MaxSetKeys)
	}
	for i, key := range keys {
		if key == nil {
			return fmt.Errorf("set the box's keys: key %d is missing", i+1)
		}
		if _, isCert := key.(*ssh.Certificate); isCert {
			return fmt.Errorf("set the box's keys: key %d is a certificate, not a key", i+1)
		}
	}
	if !isCrabboxServer(c) {
		var lines []byte
		for _, key := range keys {
			lines = append(lines, ssh.MarshalAuthorizedKey(key)...)
		}
		if _, err := run(ctx, c, setKeyScript, bytes.NewReader(lines)); err != nil {
			return fmt.Errorf("set the box's keys: replace ~/.ssh/authorized_keys: %w", err)
		}
		return nil
	}
	// crabbox's server knows the requests: false is a refusal (its log
	// says why), and its user's home is not the box's to rewrite.
	typ, payload := sshserver.SetKeysRequest, sshserver.MarshalKeys(keys...)
	if len(keys) == 1 {
		typ, payload = sshserver.SetKeyRequest, keys[0].Marshal()
	}
	ok, err := request(ctx, c, typ, payload)
	if err != nil {
		return fmt.Errorf("set the box's keys: %w", err)
	}
	if !ok {
		return errors.New("set the box's keys: the box refused the new keys")
	}
	return nil
}

// setKeyScript writes its stdin, the new authorized_keys, to a temporary
// file beside ~/.ssh/authorized_keys (noclobber: never through a link an
// earlier user left) and renames it over the old one, so that sshd reads
// the old list or the new one, never a part. The key comes on stdin, not
// in the command line.
const setKeyScript = `set -eu
umask 077
mkdir -p "$HOME/.ssh"
tmp="$HOME/.ssh/.authorized_keys.crabbox.$$"
trap 'rm -f "$tmp"' EXIT
set -C
cat >"$tmp"
mv -f "$tmp" "$HOME/.ssh/authorized_keys"
rm -f "$HOME/.ssh/authorized_keys2"`

// isCrabboxServer reports whether c talks to crabbox's own SSH server.
func isCrabboxServer(c *ssh.Client) bool {
	return strings.HasPrefix(string(c.ServerVersion()), "SSH-2.0-crabbox")
}

// request sends a global request and waits for the answer or the end of
// ctx. A request whose wait ctx ended gets its answer (or the connection's
// end) on a goroutine that then ends.
func request(ctx context.Context, c *ssh.Client, typ string, payload []byte) (bool, error) {
	type answer struct {
		ok  bool
		err error
	}
	done := make(chan answer, 1)
	go func() {
		ok, _, err := c.SendRequest(typ, true, payload)
		done <- answer{ok, err}
	}()
	select {
	case a := <-done:
		return a.ok, a.err
	case <-ctx.Done():
		return false, context.Cause(ctx)
	}
}

// maxOutput bounds what run keeps of a command's stdout and stderr.
const maxOutput = 64 << 10

// run runs script on the box with stdin and returns its stdout. A failure
// holds the end of what it wrote to stderr. When ctx ends run closes the
// session and returns at once.
func run(ctx context.Context, c *ssh.Client, script string, stdin io.Reader) (string, error) {
	sess, err := remote.NewSession(ctx, c)
	if err != nil {
		return "", fmt.Errorf("open a session: %w", err)
	}
	var stdout, stderr capped
	sess.Stdin, sess.Stdout, sess.Stderr = stdin, &stdout, &stderr
	done := make(chan error, 1)
	go func() { done <- sess.Run(script) }()
	select {
	case err = <-done:
		_ = sess.Close()
	case <-ctx.Done():
		_ = sess.Close()
		return "", context.Cause(ctx)
	}
	if err != nil {
		if msg := strings.TrimSpace(stderr.String()); msg != "" {
			return "", fmt.Errorf("%w: %s", err, msg)
		}
		return "", err
	}
	return stdout.String(), nil
}

// capped is a buffer that keeps the first maxOutput bytes written to it.
type capped struct{ bytes.Buffer }

func (b *capped) Write(p []byte) (int, error) {
	if room := maxOutput - b.Len(); room > 0 {
		b.Buffer.Write(p[:min(len(p), room)])
	}
	return len(p), nil
}

// poolKeyInfo is the HKDF info of pool keys, before the lease ID: a change
// would make every replica derive other keys than the boxes hold.
const poolKeyInfo = "crabbox pool box ssh key v1\x00"

// MinPoolSecret is the shortest secret PoolKey accepts, in bytes.
const MinPoolSecret = 32

// PoolKey derives the ed25519 SSH key of pool box leaseID from secret
// (HKDF-SHA256, with a fixed info string and the lease ID): every
// coordinator replica with the same secret derives the same key; it is
// never stored. secret must be at least MinPoolSecret bytes.
func PoolKey(secret []byte, leaseID string) (ssh.Signer, error) {
	if len(secret) < MinPoolSecret {
		return nil, fmt.Errorf("pool key: the secret is %d bytes, want at least %d", len(secret), MinPoolSecret)
	}
	if leaseID == "" {
		return nil, errors.New("pool key: no lease ID")
	}
	seed, err := hkdf.Key(sha256.New, secret, nil, poolKeyInfo+leaseID, ed25519.SeedSize)
	if err != nil {
		return nil, fmt.Errorf("pool key: %w", err)
	}
	return ssh.NewSignerFromKey(ed25519.NewKeyFromSeed(seed))
}

// accessKeyInfo is the HKDF info of access keys, before the lease ID.
const accessKeyInfo = "crabbox box access ssh key v1\x00"

// AccessKey derives the ed25519 SSH key with which the coordinator reaches
// lease leaseID's box for its terminal, port previews, desktop and shared
// users (HKDF-SHA256 of secret, a fixed info string and the lease ID, as
// PoolKey, but never the same key). The lease's owner installs its public
// half on the box next to the lease key. secret must be at least
// MinPoolSecret bytes.
func AccessKey(secret []byte, leaseID string) (ssh.Signer, error) {
	if len(secret) < MinPoolSecret {
		return nil, fmt.Errorf("access key: the secret is %d bytes, want at least %d", len(secret), MinPoolSecret)
	}
	if leaseID == "" {
		return nil, errors.New("access key: no lease ID")
	}
	seed, err := hkdf.Key(sha256.New, secret, nil, accessKeyInfo+leaseID, ed25519.SeedSize)
	if err != nil {
		return nil, fmt.Errorf("access key: %w", err)
	}
	return ssh.NewSignerFromKey(ed25519.NewKeyFromSeed(seed))
}

// relayHostKeyInfo is the HKDF info of relay host keys, before the lease ID.
const relayHostKeyInfo = "crabbox lease ssh relay host key v1\x00"

// RelayHostKey derives the ed25519 host key with which the coordinator
// answers SSH for lease leaseID's box on behalf of the users it is shared
// with (the relay terminates their SSH): every replica with the same
// secret presents the same key for a lease, so clients can pin it, and
// it is never an access key or a pool key. secret must be at least
// MinPoolSecret bytes.
func RelayHostKey(secret []byte, leaseID string) (ssh.Signer, error) {
	if len(secret) < MinPoolSecret {
		return nil, fmt.Errorf("relay host key: the secret is %d bytes, want at least %d", len(secret), MinPoolSecret)
	}
	if leaseID == "" {
		return nil, errors.New("relay host key: no lease ID")
	}
	seed, err := hkdf.Key(sha256.New, secret, nil, relayHostKeyInfo+leaseID, ed25519.SeedSize)
	if err != nil {
		return nil, fmt.Errorf("relay host key: %w", err)
	}
	return ssh.NewSignerFromKey(ed25519.NewKeyFromSeed(seed))
}
