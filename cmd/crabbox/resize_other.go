//go:build !unix

package main

import "github.com/crabbox-dev/crabbox"

// watchResize reports nothing where there is no SIGWINCH.
func watchResize(int) (<-chan crabbox.WindowSize, func()) { return nil, func() {} }
