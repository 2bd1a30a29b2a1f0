package coordinator_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"

	"github.com/crabbox-dev/crabbox/coordinator"
	"github.com/crabbox-dev/crabbox/coordinator/auth"
	"github.com/crabbox-dev/crabbox/coordinator/store/sqlite"
	"github.com/crabbox-dev/crabbox/provider"
	"github.com/crabbox-dev/crabbox/providers/local"
)

// A coordinator on an embedded SQLite database that leases boxes from the
// local provider: what `crabbox coordinator serve` does, minus the flags.
func ExampleNew() {
	dir, _ := os.MkdirTemp("", "coordinator-example")
	defer os.RemoveAll(dir)
	ctx, stop := context.WithCancel(context.Background())
	defer stop()

	st, err := sqlite.Open(ctx, filepath.Join(dir, "coordinator.db"))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer st.Close()
	boxes, err := local.New(local.Config{Root: filepath.Join(dir, "boxes")}, provider.Runtime{})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer boxes.Close()

	srv, err := coordinator.New(coordinator.Config{
		Store:     st,
		Providers: map[string]provider.SSHLeaseBackend{local.Name: boxes},
		// Secrets come from the environment or files, never flags.
		Tokens: auth.Config{AdminToken: "example-admin-token", DefaultOrg: "example"},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	maintenance := make(chan error)
	go func() { maintenance <- srv.Run(ctx) }()
	defer func() { stop(); <-maintenance }()

	hs := httptest.NewServer(srv) // a real main serves srv.HTTPServer()
	defer hs.Close()
	resp, err := http.Get(hs.URL + "/v1/health")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	fmt.Print(resp.StatusCode, " ", string(body))
	// Output: 200 {"ok":true,"service":"crabbox-coordinator"}
}
