package provider

import "errors"

// Portable error kinds. Backends wrap them (fmt.Errorf("...: %w", ErrNotFound))
// and may wrap the raw SDK error beside them ("%w: %w") so callers can reach
// it with errors.As.
var (
	ErrNotFound        = errors.New("not found")
	ErrConflict        = errors.New("conflict")
	ErrCapacity        = errors.New("no capacity")
	ErrUnauthenticated = errors.New("unauthenticated")
	ErrPrecondition    = errors.New("precondition failed")
	ErrTransient       = errors.New("transient failure")
)
