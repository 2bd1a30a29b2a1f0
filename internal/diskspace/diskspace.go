// Package diskspace tells how much room a directory's filesystem has left,
// and whether an error is a full disk, on every system the client runs on.
// The doctor reports free space with it, and the writers of crabbox's state
// directory name a full disk as such.
package diskspace

import (
	"errors"
	"fmt"

	"github.com/crabbox-dev/crabbox/internal/units"
)

// Space is what a filesystem has room for, in bytes.
type Space struct {
	// Avail is what the caller may still write (without the blocks
	// reserved for root on unix).
	Avail uint64
	// Total is the filesystem's size.
	Total uint64
}

// Low reports whether s is under 1 GiB or under 5% of its filesystem: room
// for little more than one checkout, or a disk about to fill.
func (s Space) Low() bool {
	return s.Avail < LowBytes || (s.Total > 0 && s.Avail*100 < s.Total*LowPercent)
}

// The thresholds of Space.Low.
const (
	LowBytes   = 1 << 30
	LowPercent = 5
)

// Free returns the space of the filesystem holding dir.
func Free(dir string) (Space, error) {
	s, err := free(dir)
	if err != nil {
		return Space{}, fmt.Errorf("free space of %s: %w", dir, err)
	}
	return s, nil
}

// ErrFull is what Explain wraps around a full-disk error: errors.Is
// finds it, and the message says "disk full".
var ErrFull = errors.New("disk full")

// IsFull reports whether err is a full disk (ENOSPC, or a quota exceeded;
// ERROR_DISK_FULL on windows).
func IsFull(err error) bool { return err != nil && (errors.Is(err, ErrFull) || isFull(err)) }

// Explain returns err, saying "disk full" first when it is one, and dir's
// free space when it can tell; other errors are returned as they are.
func Explain(err error, dir string) error {
	if err == nil || errors.Is(err, ErrFull) || !isFull(err) {
		return err
	}
	if s, ferr := free(dir); ferr == nil {
		return fmt.Errorf("%w at %s (%s free): %w", ErrFull, dir, units.Bytes(int64(s.Avail)), err)
	}
	return fmt.Errorf("%w at %s: %w", ErrFull, dir, err)
}
