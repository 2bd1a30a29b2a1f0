package crabboxtest_test

import (
	"context"
	"fmt"
	"os"
	"testing"

	"github.com/crabbox-dev/crabbox"
	"github.com/crabbox-dev/crabbox/crabboxtest"
)

// A test with a box of its own, released when the test ends. (Not run
// here: it needs the test's t.)
func ExampleBox() {
	var t *testing.T // the test's argument

	box := crabboxtest.Box(t)
	crabboxtest.Run(t, box, "go", "build", "./...")
	out, exit := crabboxtest.RunExitCode(t, box, "go", "vet", "./...")
	if exit != 0 {
		t.Errorf("go vet found problems:\n%s", out)
	}
}

// A test binary with one box for all its tests: TestMain is one line, and
// the tests use the box with crabboxtest.Run. (Not run here: it needs
// TestMain's m.)
func ExampleMain() {
	var m *testing.M // TestMain's argument
	var box *crabbox.Lease

	crabboxtest.Main(m, &box)
}

// Start is the harness of Main for a TestMain that does more: here it
// leases a box on the local provider and syncs the checkout holding the
// working directory (the package directory, under go test).
func ExampleStart() {
	ctx := context.Background()
	box, stop, err := crabboxtest.Start(ctx)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer stop()

	res, err := box.Run(ctx, crabbox.RunRequest{
		Command: []string{"head", "-n", "1", "crabboxtest.go"},
		NoSync:  true, // synced by Start
		Stdout:  os.Stdout,
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("exit code:", res.ExitCode)
	fmt.Println("released:", stop() == nil)
	// Output:
	// // Package crabboxtest ties crabbox boxes to Go tests.
	// exit code: 0
	// released: true
}
