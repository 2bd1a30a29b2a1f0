// Command outside is a program that uses crabbox from outside its
// repository, through the public API only: it acquires a local box with a
// 3-second idle timeout, runs a 6-second command and then short commands
// 2 seconds apart (the held lease stays alive however long it is idle),
// releases the box on a cancelled context, and checks that no lease is
// left.
//
// Its test builds it as a module of its own, which reaches crabbox
// through a replace directive:
//
//	go test ./examples/outside/
//
// Run it directly with a state directory to inspect afterwards:
//
//	go run ./examples/outside/ /tmp/crabbox-outside-state
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/crabbox-dev/crabbox"
	_ "github.com/crabbox-dev/crabbox/providers/local"
)

const (
	idleTimeout = 3 * time.Second
	pause       = 2 * time.Second
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: outside STATE_DIR")
		os.Exit(2)
	}
	if err := run(os.Args[1], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "outside:", err)
		os.Exit(1)
	}
}

func run(state string, out io.Writer) error {
	work, err := os.MkdirTemp("", "crabbox-outside-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)

	client, err := crabbox.New(crabbox.WithStateDir(state))
	if err != nil {
		return err
	}
	defer client.Close()

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	box, err := client.Acquire(ctx, crabbox.AcquireOptions{IdleTimeout: idleTimeout})
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "acquired a box with a %s idle timeout\n", idleTimeout)

	// work is a plain directory that is not synced: commands run in its
	// (empty) workdir on the box.
	onBox := func(argv ...string) error {
		res, err := box.Run(ctx, crabbox.RunRequest{Command: argv, Root: work, NoSync: true, Stdout: out, Stderr: out})
		if err != nil {
			return err
		}
		fmt.Fprintf(out, "%s: exit %d\n", strings.Join(argv, " "), res.ExitCode)
		return nil
	}
	if err := onBox("sleep", "6"); err != nil {
		return errors.Join(err, box.Release(ctx))
	}
	for i := range 2 {
		time.Sleep(pause) // idle, holding the lease
		if err := onBox("echo", fmt.Sprintf("short command %d", i+1)); err != nil {
			return errors.Join(err, box.Release(ctx))
		}
	}

	cancel()
	fmt.Fprintf(out, "released on a cancelled context: %v\n", box.Release(ctx))

	leases, err := client.List(context.Background())
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "leases left: %d\n", len(leases))
	return nil
}
