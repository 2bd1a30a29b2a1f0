package ssh

// HandoffTTL is handoffTTL, for tests.
const HandoffTTL = handoffTTL

// Handed reports whether lease id's connection waits to be taken.
func (b *Backend) Handed(id string) bool {
	b.handoff.mu.Lock()
	defer b.handoff.mu.Unlock()
	_, ok := b.handoff.conns[id]
	return ok
}
