package cloudtest

import (
	"fmt"

	"golang.org/x/crypto/ssh"

	"github.com/crabbox-dev/crabbox/providers/internal/cloud"
)

// sshSigner turns the injected host key into the signer the fake box
// presents.
func sshSigner(k cloud.HostKey) (ssh.Signer, error) {
	s, err := ssh.ParsePrivateKey(k.PrivatePEM())
	if err != nil {
		return nil, fmt.Errorf("fake box: host key: %w", err)
	}
	return s, nil
}
