//go:build unix

package main

import (
	"os"
	"os/signal"
	"syscall"

	"golang.org/x/term"

	"github.com/crabbox-dev/crabbox"
)

// watchResize reports the terminal fd's new size on every SIGWINCH until
// stop is called.
func watchResize(fd int) (sizes <-chan crabbox.WindowSize, stop func()) {
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGWINCH)
	out := make(chan crabbox.WindowSize, 1)
	done := make(chan struct{})
	go func() {
		for {
			select {
			case <-done:
				return
			case <-sig:
				if w, h, err := term.GetSize(fd); err == nil {
					select {
					case out <- crabbox.WindowSize{Width: w, Height: h}:
					case <-done:
						return
					}
				}
			}
		}
	}()
	return out, func() { signal.Stop(sig); close(done) }
}
