package store

import "time"

// LeaseShare is who a lease is shared with beyond its owner: named users
// (owner identities, in any org) with a role each, and, with Org set,
// every user of the lease's own org with that role. Roles are strings the
// store does not interpret ("read", "use", "manage"); the coordinator
// ranks them. A share grants nothing once its lease ended, so the store
// only ever finds live leases through a share.
type LeaseShare struct {
	Users     map[string]string
	Org       string
	UpdatedAt time.Time
	UpdatedBy string
}

// Empty reports whether s grants nothing.
func (s LeaseShare) Empty() bool { return len(s.Users) == 0 && s.Org == "" }
