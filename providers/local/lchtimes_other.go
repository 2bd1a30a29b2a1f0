//go:build !unix

package local

import "time"

// lchtimes leaves a symbolic link's times alone where links have none to
// set portably.
func lchtimes(string, time.Time) error { return nil }
