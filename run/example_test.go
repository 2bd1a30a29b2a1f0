package run_test

import (
	"context"
	"fmt"
	"os"

	"github.com/crabbox-dev/crabbox"
	_ "github.com/crabbox-dev/crabbox/providers/local"
	"github.com/crabbox-dev/crabbox/run"
)

// Run over the SSH connection of a local box: output streams back as it
// comes, the exit code is exact, and the environment is only what the
// caller allows.
func ExampleRun() {
	ctx := context.Background()
	state, _ := os.MkdirTemp("", "crabbox-state-")
	defer os.RemoveAll(state)
	client, err := crabbox.New(crabbox.WithStateDir(state))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer client.Close()
	box, err := client.Acquire(ctx, crabbox.AcquireOptions{})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer box.Release(ctx)
	conn, err := box.SSH(ctx)
	if err != nil {
		fmt.Println(err)
		return
	}

	env := run.AllowEnv([]string{"GREETING=hello", "SECRET_TOKEN=hunter2"}, []string{"GREETING"})
	res, err := run.Run(ctx, conn, run.Command{
		Shell:  `echo "$GREETING from the box; token: ${SECRET_TOKEN:-unset}"; kill -TERM $$`,
		Env:    env,
		Stdout: os.Stdout,
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("exit code:", res.ExitCode, "signal:", res.Signal)
	// Output:
	// hello from the box; token: unset
	// exit code: 143 signal: TERM
}
