package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/peterbourgon/ff/v3/ffcli"

	"github.com/crabbox-dev/crabbox"
	"github.com/crabbox-dev/crabbox/sync/watch"
)

// envSyncWatch turns the change watcher off when "0", "false" or "off".
const envSyncWatch = "CRABBOX_SYNC_WATCH"

func (a *app) watchCmd() *ffcli.Command {
	fs := flag.NewFlagSet("watch", flag.ContinueOnError)
	socket := fs.String("socket", "", "the Unix socket to answer on")
	return &ffcli.Command{
		Name:       "watch",
		ShortUsage: "crabbox watch --socket PATH ROOT",
		ShortHelp:  "keep a checkout's change clock so untouched syncs skip listing it",
		LongHelp: `Watch a git checkout and answer on a Unix socket whether anything in it
changed, so that a sync of an untouched checkout lists nothing, whatever its
size. crabbox starts this itself on Linux, one per checkout, and it ends
after 30 minutes without a question or when the checkout is removed; there
is no need to run it by hand. Set CRABBOX_SYNC_WATCH=0 to never start one.

It prints "ready" on stdout once it answers on the socket; a question asked
before it has walked the checkout waits for the walk.`,
		FlagSet: fs,
		Exec: func(ctx context.Context, args []string) error {
			if *socket == "" || len(args) != 1 {
				return usagef("watch: want --socket PATH and one checkout directory")
			}
			root, err := filepath.Abs(args[0])
			if err != nil {
				return err
			}
			return watch.ListenAndServe(ctx, root, *socket, watch.ServeOptions{
				Listening: func() { fmt.Fprintln(a.stdout, "ready") },
			})
		},
	}
}

// watchOption gives the client a change watcher for its syncs (see
// crabbox.WithChangeWatch), unless CRABBOX_SYNC_WATCH turns it off or the
// platform has none.
func watchOption() (crabbox.Option, bool) {
	if envOff(envSyncWatch) || !watch.Supported() {
		return nil, false
	}
	exe, err := os.Executable()
	if err != nil {
		return nil, false
	}
	return crabbox.WithChangeWatch(func(ctx context.Context, root, socket string) error {
		return startWatcher(ctx, exe, root, socket)
	}), true
}

// envOff reports whether the environment variable name turns something
// off: "0", "false", "off" or "no", in any case.
func envOff(name string) bool {
	switch strings.ToLower(os.Getenv(name)) {
	case "0", "false", "off", "no":
		return true
	}
	return false
}
