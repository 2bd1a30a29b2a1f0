package main

import (
	"context"
	"flag"
	"fmt"
	"runtime/debug"

	"github.com/peterbourgon/ff/v3/ffcli"
)

// version is set at build time with -ldflags "-X main.version=v1.2.3".
var version = ""

func (a *app) versionCmd() *ffcli.Command {
	return &ffcli.Command{
		Name:       "version",
		ShortUsage: "crabbox version",
		ShortHelp:  "print the version",
		LongHelp: `Print crabbox's version.

  crabbox version`,
		FlagSet: flag.NewFlagSet("version", flag.ContinueOnError),
		Exec: func(context.Context, []string) error {
			v := version
			if v == "" {
				v = "(devel)"
				if info, ok := debug.ReadBuildInfo(); ok && info.Main.Version != "" {
					v = info.Main.Version
				}
			}
			fmt.Fprintf(a.stdout, "crabbox %s\n", v)
			return nil
		},
	}
}
