package cloud

import (
	"time"

	"github.com/crabbox-dev/crabbox/provider"
)

// Start is what a VM cloud's acquire makes before its first API call: a
// host key made by the client, the lease's ownership labels (naming that
// key) and the bootstrap user data installing it with the lease key.
type Start struct {
	HostKey  HostKey
	Labels   map[string]string
	UserData string
}

// StartAcquire checks req at now (CheckAcquire) and makes its Start: a
// new host key, the labels of lo with that key, and the user data of bs
// with the lease key, the host key and the lease's TTL as the
// self-destruct timer.
func StartAcquire(req provider.AcquireRequest, now time.Time, lo LabelOptions, bs Bootstrap) (Start, error) {
	if err := CheckAcquire(req, now); err != nil {
		return Start{}, err
	}
	hostKey, err := NewHostKey()
	if err != nil {
		return Start{}, err
	}
	lo.HostKey = hostKey.PublicKey()
	labels, err := NewLabels(req, lo)
	if err != nil {
		return Start{}, err
	}
	bs.AuthorizedKey, bs.HostKey, bs.SelfDestructAfter = req.PublicKey, hostKey, req.TTL
	userData, err := bs.UserData()
	if err != nil {
		return Start{}, err
	}
	return Start{HostKey: hostKey, Labels: labels, UserData: userData}, nil
}
