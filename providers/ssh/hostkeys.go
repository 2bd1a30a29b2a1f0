package ssh

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"slices"
	"strings"

	"github.com/crabbox-dev/crabbox/internal/atomicfile"

	cryptossh "golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"
)

// HostKeyChangedError is returned when a host offers a key other than the
// one pinned for its host:port. The provider never replaces a pin; the user
// removes the line from File once they have checked the change is expected.
type HostKeyChangedError struct {
	Addr    string // host:port as configured
	File    string // the known_hosts file holding the pin
	Pinned  []cryptossh.PublicKey
	Offered cryptossh.PublicKey
}

func (e *HostKeyChangedError) Error() string {
	pinned := make([]string, len(e.Pinned))
	for i, k := range e.Pinned {
		pinned[i] = describeKey(k)
	}
	return fmt.Sprintf("host key of %s changed: pinned %s, host offers %s; refusing to connect (if the change is expected, remove the %q line from %s)",
		e.Addr, strings.Join(pinned, " or "), describeKey(e.Offered), knownhosts.Normalize(e.Addr), e.File)
}

func describeKey(k cryptossh.PublicKey) string {
	return cryptossh.FingerprintSHA256(k) + " (" + k.Type() + ")"
}

// pins are the host keys trusted on first use, one per host:port, kept in an
// OpenSSH known_hosts file so ssh-keygen -F can read it.
type pins struct {
	path     string
	lockPath string
}

// lookup returns the keys pinned for addr (host:port); none means the host
// has not been seen.
func (p *pins) lookup(addr string) ([]cryptossh.PublicKey, error) {
	data, err := os.ReadFile(p.path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read pinned host keys %s: %w", p.path, err)
	}
	return p.parse(data, addr)
}

func (p *pins) parse(data []byte, addr string) ([]cryptossh.PublicKey, error) {
	want := knownhosts.Normalize(addr)
	var keys []cryptossh.PublicKey
	for rest := data; len(rest) > 0; {
		marker, hosts, key, _, next, err := cryptossh.ParseKnownHosts(rest)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("read pinned host keys %s: %w", p.path, err)
		}
		rest = next
		if marker == "" && slices.Contains(hosts, want) {
			keys = append(keys, key)
		}
	}
	return keys, nil
}

// check verifies key for addr against its pins, pinning it when addr has
// none. A different key is a *HostKeyChangedError and changes nothing.
func (p *pins) check(addr string, key cryptossh.PublicKey) error {
	return withLock(p.lockPath, func() error {
		data, err := os.ReadFile(p.path)
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("read pinned host keys %s: %w", p.path, err)
		}
		pinned, err := p.parse(data, addr)
		if err != nil {
			return err
		}
		if len(pinned) > 0 {
			for _, k := range pinned {
				if bytes.Equal(k.Marshal(), key.Marshal()) {
					return nil
				}
			}
			return &HostKeyChangedError{Addr: addr, File: p.path, Pinned: pinned, Offered: key}
		}
		if len(data) > 0 && data[len(data)-1] != '\n' {
			data = append(data, '\n')
		}
		data = append(data, knownhosts.Line([]string{addr}, key)+"\n"...)
		if err := atomicfile.Write(p.path, data); err != nil {
			return fmt.Errorf("pin host key of %s in %s: %w", addr, p.path, err)
		}
		return nil
	})
}

// hostKeyAlgorithms restricts the handshake to the pinned keys' types, so a
// host with several keys is always checked against the one that was pinned.
func hostKeyAlgorithms(pinned []cryptossh.PublicKey) []string {
	var algos []string
	for _, k := range pinned {
		var add []string
		if k.Type() == cryptossh.KeyAlgoRSA {
			add = []string{cryptossh.KeyAlgoRSASHA512, cryptossh.KeyAlgoRSASHA256, cryptossh.KeyAlgoRSA}
		} else {
			add = []string{k.Type()}
		}
		for _, a := range add {
			if !slices.Contains(algos, a) {
				algos = append(algos, a)
			}
		}
	}
	return algos
}
