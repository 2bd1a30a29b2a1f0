package crabbox

import (
	coordclient "github.com/crabbox-dev/crabbox/coordinator/client"
	"github.com/crabbox-dev/crabbox/lease"
)

// Internals the package's external tests look at.

// StoreOf is the client's lease store.
func StoreOf(c *Client) *lease.Store { return c.store }

// CoordinatorOf is the client's coordinator client, or nil.
func CoordinatorOf(c *Client) *coordclient.Client {
	if c.broker == nil {
		return nil
	}
	return c.broker.coord
}

// ExitCrabboxFailure is the exit code a coordinator records for a run that
// failed in crabbox.
const ExitCrabboxFailure = exitCrabboxFailure
