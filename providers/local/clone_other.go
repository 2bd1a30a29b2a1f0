//go:build !linux && !darwin

package local

import "errors"

// reflink is not available here: copies read and write.
func reflink(_, _ string) error { return errors.ErrUnsupported }
