//go:build !unix

package main

import "errors"

// startSharer is never called where sshmux.Supported is false.
func startSharer(exe, id, socket string) error {
	return errors.New("shared connections need Linux or macOS")
}
