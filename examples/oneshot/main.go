// Command oneshot runs one command on a fresh local box with the current
// directory synced to it, the way `crabbox run` does, in a dozen lines of
// library calls:
//
//	go run ./examples/oneshot -- sh -c 'ls; uname -a'
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"

	"github.com/crabbox-dev/crabbox"
	_ "github.com/crabbox-dev/crabbox/providers/local"
)

func main() { os.Exit(oneshot(os.Args[1:])) }

func oneshot(args []string) int {
	if len(args) > 0 && args[0] == "--" {
		args = args[1:]
	}
	if len(args) == 0 {
		fmt.Fprintln(os.Stderr, "usage: oneshot -- command [args...]")
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()

	client, err := crabbox.New()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 125
	}
	defer client.Close()
	res, err := client.Run(ctx, crabbox.RunRequest{Command: args, Stdout: os.Stdout, Stderr: os.Stderr})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 125
	}
	return res.ExitCode
}
