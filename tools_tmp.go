//go:build tools

// Temporary: pins dependencies while packages are written in parallel. Removed before landing.
package tools

import (
	_ "github.com/creack/pty"
	_ "github.com/gofrs/flock"
	_ "github.com/google/go-cmp/cmp"
	_ "github.com/jonboulle/clockwork"
	_ "github.com/peterbourgon/ff/v3/ffcli"
	_ "go.uber.org/goleak"
	_ "golang.org/x/crypto/ssh"
	_ "golang.org/x/sys/unix"
	_ "golang.org/x/term"
)
