package cloud

import "time"

// FirstPoll is the first pause of a readiness poll. A box on a fast API is
// often ready within a second; pauses double from here up to the
// configured interval, so a quick box is seen quickly and a slow one is not
// polled more often than configured.
const FirstPoll = 250 * time.Millisecond

// Backoff paces a readiness poll: Next returns FirstPoll (or the interval,
// when that is shorter), then twice the previous pause, up to the interval.
// The zero Backoff never pauses longer than FirstPoll.
type Backoff struct {
	// Interval is the longest pause.
	Interval time.Duration
	next     time.Duration
}

// NewBackoff returns a backoff whose pauses grow to interval.
func NewBackoff(interval time.Duration) *Backoff { return &Backoff{Interval: interval} }

// Next returns the next pause.
func (b *Backoff) Next() time.Duration {
	limit := b.Interval
	if limit <= 0 {
		limit = FirstPoll
	}
	if b.next <= 0 {
		b.next = FirstPoll
	}
	d := min(b.next, limit)
	b.next = min(2*b.next, limit)
	return d
}
