package coordinatorcmd

import (
	"io"
	"strings"
	"testing"

	"github.com/crabbox-dev/crabbox/provider"
	_ "github.com/crabbox-dev/crabbox/providers/daytona"
)

// The coordinator configures daytona in SSH mode, the one with SSH leases
// it can broker; with ssh set to false it refuses it.
func TestServerBackendsDaytonaSSH(t *testing.T) {
	t.Setenv("DAYTONA_API_KEY", "dtn_test")
	closeAll := func(m map[string]provider.SSHLeaseBackend) {
		for _, b := range m {
			if c, ok := b.(io.Closer); ok {
				c.Close()
			}
		}
	}
	got, err := serverBackends(map[string]provider.Config{"daytona": {"api-url": "http://127.0.0.1:1/api"}}, provider.Runtime{})
	defer closeAll(got)
	if err != nil {
		t.Fatal(err)
	}
	b, ok := got["daytona"].(provider.SSHLoginBackend)
	if !ok {
		t.Fatalf("daytona backend %T is not an SSHLoginBackend", got["daytona"])
	}
	if spec := b.Spec(); spec.Kind != provider.KindSSHLease || spec.Coordinator != provider.CoordinatorSupported {
		t.Errorf("daytona spec kind %s, coordinator %s; want ssh-lease, supported", spec.Kind, spec.Coordinator)
	}
	got, err = serverBackends(map[string]provider.Config{"daytona": {"ssh": "false"}}, provider.Runtime{})
	defer closeAll(got)
	if err == nil || !strings.Contains(err.Error(), "runs commands itself") {
		t.Errorf("daytona with ssh=false: %v, want it refused", err)
	}
}
