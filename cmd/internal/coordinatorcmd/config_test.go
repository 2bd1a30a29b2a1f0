package coordinatorcmd

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestServerConfigCheckpoints(t *testing.T) {
	path := filepath.Join(t.TempDir(), "config.json")
	body := `{"providers": {"aws": {}}, "storagePrices": {"aws": 0.05},
		"checkpointLimits": {"maxPerOwner": 3, "maxPerOrg": -1, "maxCreations": 4, "maxCreationsPerOwner": 1}}`
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := loadServerConfig(path)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(map[string]float64{"aws": 0.05}, cfg.StoragePrices); diff != "" {
		t.Errorf("storage prices (-want +got):\n%s", diff)
	}
	want := serverCheckpointLimits{MaxPerOwner: 3, MaxPerOrg: -1, MaxCreations: 4, MaxCreationsPerOwner: 1}
	if diff := cmp.Diff(want, cfg.CheckpointLimits); diff != "" {
		t.Errorf("checkpoint limits (-want +got):\n%s", diff)
	}
}
