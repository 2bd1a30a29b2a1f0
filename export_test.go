package crabbox

import (
	"time"

	coordclient "github.com/crabbox-dev/crabbox/coordinator/client"
	"github.com/crabbox-dev/crabbox/lease"
	"github.com/crabbox-dev/crabbox/provider"
	"github.com/crabbox-dev/crabbox/sync"
)

// Internals the package's external tests look at.

// StoreOf is the client's lease store.
func StoreOf(c *Client) *lease.Store { return c.store }

// RegistryOf is the client's provider registry.
func RegistryOf(c *Client) *provider.Registry { return c.registry }

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

// SetSyncLimits replaces the client's sync guardrails.
func SetSyncLimits(c *Client, l sync.Limits) { c.syncLimits = &l }

// SetLoginPauses replaces the pauses between the dials of a login lease's
// connection.
func SetLoginPauses(c *Client, pauses []time.Duration) { c.loginPauses = pauses }
