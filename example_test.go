package crabbox_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/crabbox-dev/crabbox"
	"github.com/crabbox-dev/crabbox/provider"
	"github.com/crabbox-dev/crabbox/providers/local"
	"github.com/crabbox-dev/crabbox/run"
)

// exampleCheckout makes a small directory to sync.
func exampleCheckout() string {
	dir, _ := os.MkdirTemp("", "crabbox-example-")
	_ = os.WriteFile(filepath.Join(dir, "hello.txt"), []byte("hello from the checkout\n"), 0o644)
	_ = exec.Command("git", "-C", dir, "init", "-q").Run() // a run syncs a git checkout
	return dir
}

// The one-shot workflow: acquire a box, sync the checkout, run the command,
// release the box.
func ExampleClient_Run() {
	ctx := context.Background()
	state, _ := os.MkdirTemp("", "crabbox-state-")
	defer os.RemoveAll(state)
	checkout := exampleCheckout()
	defer os.RemoveAll(checkout)

	client, err := crabbox.New(crabbox.WithStateDir(state))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer client.Close()

	res, err := client.Run(ctx, crabbox.RunRequest{
		Root:    checkout,
		Command: []string{"sh", "-c", "cat hello.txt; exit 3"},
		Stdout:  os.Stdout,
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("exit code:", res.ExitCode)
	// Output:
	// hello from the checkout
	// exit code: 3
}

// The same steps one by one, keeping the box between commands.
func ExampleClient_Acquire() {
	ctx := context.Background()
	state, _ := os.MkdirTemp("", "crabbox-state-")
	defer os.RemoveAll(state)
	checkout := exampleCheckout()
	defer os.RemoveAll(checkout)

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
	fmt.Println("lease ID looks right:", strings.HasPrefix(box.ID(), "cbx_"))

	stats, err := box.Sync(ctx, checkout, crabbox.SyncOptions{})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("files synced:", stats.Sent)

	res, err := box.Run(ctx, crabbox.RunRequest{
		Root: checkout, NoSync: true, // synced above
		Command: []string{"wc", "-l", "hello.txt"},
		Stdout:  os.Stdout,
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("exit code:", res.ExitCode)
	// Output:
	// lease ID looks right: true
	// files synced: 1
	// 1 hello.txt
	// exit code: 0
}

// A backend built with a provider's plain constructor, handed to the client
// without any registry. The program owns the backend: it closes it after
// the client.
func ExampleWithBackend() {
	ctx := context.Background()
	state, _ := os.MkdirTemp("", "crabbox-state-")
	defer os.RemoveAll(state)
	boxes, _ := os.MkdirTemp("", "crabbox-boxes-")
	defer os.RemoveAll(boxes)

	backend, err := local.New(local.Config{Root: boxes}, provider.Runtime{})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer backend.Close() // runs after client.Close

	client, err := crabbox.New(crabbox.WithStateDir(state), crabbox.WithBackend(backend))
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
	fmt.Println("provider:", box.Provider())

	res, err := box.Exec(ctx, run.Command{Command: []string{"echo", "hello from my own backend"}, Stdout: os.Stdout})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("exit code:", res.ExitCode)
	// Output:
	// provider: local
	// hello from my own backend
	// exit code: 0
}
