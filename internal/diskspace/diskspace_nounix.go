//go:build !unix && !windows

package diskspace

func isFull(error) bool { return false }
