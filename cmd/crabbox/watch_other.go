//go:build !unix

package main

import (
	"context"
	"errors"
)

// startWatcher is never called where watch.Supported is false.
func startWatcher(ctx context.Context, exe, root, socket string) error {
	return errors.New("change watchers need Linux")
}
