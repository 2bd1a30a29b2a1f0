//go:build !unix

package main

import "errors"

// startConnHold is never called where sshmux.Supported is false.
func startConnHold(exe, id, socket string) error {
	return errors.New("shared connections need Linux or macOS")
}
