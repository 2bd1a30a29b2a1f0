package cloudtest

import (
	"fmt"
	"net"
	"strconv"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/crabbox-dev/crabbox/lease"
	"github.com/crabbox-dev/crabbox/provider"
)

// Run runs cmd on the box of target as the holder of key, checking the
// box's host key against target.HostKey, and returns its combined output.
// An error says whether the box refused the key or the command failed.
func Run(target provider.LeaseTarget, key lease.Key, cmd string) (string, error) {
	hostKey, err := lease.ParsePublicKey(target.HostKey)
	if err != nil {
		return "", fmt.Errorf("lease %s: host key: %w", target.LeaseID, err)
	}
	c, err := ssh.Dial("tcp", net.JoinHostPort(target.Host, strconv.Itoa(target.Port)), &ssh.ClientConfig{
		User: target.User, Auth: []ssh.AuthMethod{ssh.PublicKeys(key.Signer)},
		HostKeyCallback: ssh.FixedHostKey(hostKey), Timeout: time.Minute,
	})
	if err != nil {
		return "", fmt.Errorf("lease %s: dial: %w", target.LeaseID, err)
	}
	defer c.Close()
	s, err := c.NewSession()
	if err != nil {
		return "", fmt.Errorf("lease %s: session: %w", target.LeaseID, err)
	}
	defer s.Close()
	out, err := s.CombinedOutput(cmd)
	if err != nil {
		return string(out), fmt.Errorf("lease %s: %s: %w", target.LeaseID, cmd, err)
	}
	return string(out), nil
}
