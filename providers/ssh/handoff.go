package ssh

import (
	gosync "sync"
	"time"

	"github.com/jonboulle/clockwork"
	cryptossh "golang.org/x/crypto/ssh"
)

// handoffTTL is how long Acquire's connection waits to be taken before it
// is closed.
const handoffTTL = time.Minute

// handoffs holds the connections Acquire opened until the library takes
// them (provider.ConnectionHandoff).
type handoffs struct {
	mu    gosync.Mutex
	conns map[string]handed
}

type handed struct {
	client *cryptossh.Client
	timer  clockwork.Timer
}

// put keeps c for lease id until taken, dropped, or handoffTTL passes.
func (h *handoffs) put(clock clockwork.Clock, id string, c *cryptossh.Client) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.conns == nil {
		h.conns = map[string]handed{}
	}
	// Lease IDs are new at each Acquire: nothing is there yet.
	h.conns[id] = handed{client: c, timer: clock.AfterFunc(handoffTTL, func() { h.drop(id, c) })}
}

// take removes and returns lease id's connection, or nil.
func (h *handoffs) take(id string) *cryptossh.Client {
	h.mu.Lock()
	defer h.mu.Unlock()
	hc, ok := h.conns[id]
	if !ok {
		return nil
	}
	delete(h.conns, id)
	hc.timer.Stop()
	return hc.client
}

// drop closes lease id's connection if it is still c (any, with c nil).
func (h *handoffs) drop(id string, c *cryptossh.Client) {
	h.mu.Lock()
	hc, ok := h.conns[id]
	ok = ok && (c == nil || hc.client == c)
	if ok {
		delete(h.conns, id)
	}
	h.mu.Unlock()
	if ok {
		hc.timer.Stop()
		hc.client.Close()
	}
}

// closeAll closes every connection not taken.
func (h *handoffs) closeAll() {
	h.mu.Lock()
	conns := h.conns
	h.conns = nil
	h.mu.Unlock()
	for _, hc := range conns {
		hc.timer.Stop()
		hc.client.Close()
	}
}

// TakeConnection returns the connection Acquire opened to the host for
// lease id (provider.ConnectionHandoff), or nil.
func (b *Backend) TakeConnection(id string) *cryptossh.Client { return b.handoff.take(id) }

// Close closes the connections Acquire opened that were not taken.
func (b *Backend) Close() error {
	b.handoff.closeAll()
	return nil
}
