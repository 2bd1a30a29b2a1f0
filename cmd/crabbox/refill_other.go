//go:build !unix

package main

import "errors"

// startBackground is not available here: a pool is refilled with crabbox
// pool ensure --pool KEY.
func startBackground(string, []string, string) error {
	return errors.New("background refills need Linux or macOS")
}
