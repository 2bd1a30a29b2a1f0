package crabbox_test

import (
	"context"
	"fmt"
	"net/http/httptest"
	"os"
	"path/filepath"

	"github.com/crabbox-dev/crabbox"
	"github.com/crabbox-dev/crabbox/coordinator"
	"github.com/crabbox-dev/crabbox/coordinator/auth"
	coordclient "github.com/crabbox-dev/crabbox/coordinator/client"
	"github.com/crabbox-dev/crabbox/coordinator/store/sqlite"
	"github.com/crabbox-dev/crabbox/provider"
	"github.com/crabbox-dev/crabbox/providers/local"
)

// Brokered mode: leases come from a coordinator, the command runs directly
// on the box, and the run is recorded with the coordinator. Here the
// coordinator is embedded and serves local boxes; in real use the URL and
// token come from the environment (CRABBOX_COORDINATOR,
// CRABBOX_COORDINATOR_TOKEN).
func ExampleWithCoordinator() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "crabbox-example-")
	defer os.RemoveAll(dir)
	checkout := exampleCheckout()
	defer os.RemoveAll(checkout)

	// The coordinator: an SQLite store, one provider, an admin token.
	st, err := sqlite.Open(ctx, filepath.Join(dir, "coordinator.db"))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer st.Close()
	boxes, err := local.New(local.Config{Root: filepath.Join(dir, "boxes")}, provider.Runtime{}.WithDefaults())
	if err != nil {
		fmt.Println(err)
		return
	}
	defer boxes.Close()
	srv, err := coordinator.New(coordinator.Config{
		Store:     st,
		Providers: map[string]provider.SSHLeaseBackend{"local": boxes},
		Tokens:    auth.Config{AdminToken: "example-admin-token", DefaultOrg: "example"},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	api := httptest.NewServer(srv)
	defer api.Close()

	// The client: every lease through the coordinator.
	client, err := crabbox.New(
		crabbox.WithStateDir(filepath.Join(dir, "state")),
		crabbox.WithCoordinator(api.URL, "example-admin-token"),
		crabbox.WithBrokerMode(crabbox.BrokerAll),
	)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer client.Close()
	res, err := client.Run(ctx, crabbox.RunRequest{
		Root: checkout, Command: []string{"cat", "hello.txt"}, Stdout: os.Stdout,
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	// The run as the coordinator recorded it.
	coord, err := coordclient.New(api.URL, "example-admin-token")
	if err != nil {
		fmt.Println(err)
		return
	}
	runs, err := coord.ListRuns(ctx, coordclient.ListRunsOptions{LeaseID: res.LeaseID})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("exit", res.ExitCode, "recorded as", runs[0].State)
	coord.CloseIdleConnections()
	// Output:
	// hello from the checkout
	// exit 0 recorded as succeeded
}
