package coordinator_test

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/crabbox-dev/crabbox/coordinator"
	"github.com/crabbox-dev/crabbox/coordinator/api"
	"github.com/crabbox-dev/crabbox/coordinator/auth"
	"github.com/crabbox-dev/crabbox/coordinator/store/sqlite"
	"github.com/crabbox-dev/crabbox/provider"
)

func TestNewRejectsBadConfig(t *testing.T) {
	st, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "c.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	good := func() coordinator.Config {
		return coordinator.Config{
			Store:     st,
			Providers: map[string]provider.SSHLeaseBackend{"fake": newFake()},
			Tokens:    auth.Config{AdminToken: adminToken, DefaultOrg: "acme"},
		}
	}
	if _, err := coordinator.New(good()); err != nil {
		t.Fatalf("good config: %v", err)
	}
	tests := map[string]func(*coordinator.Config){
		"no store":         func(c *coordinator.Config) { c.Store = nil },
		"no credentials":   func(c *coordinator.Config) { c.Tokens = auth.Config{DefaultOrg: "acme"} },
		"short secret":     func(c *coordinator.Config) { c.Tokens.SessionSecret = "short" },
		"bad provider":     func(c *coordinator.Config) { c.Providers["Fake Cloud"] = newFake() },
		"nil backend":      func(c *coordinator.Config) { c.Providers["aws"] = nil },
		"unknown default":  func(c *coordinator.Config) { c.DefaultProvider = "aws" },
		"negative limit":   func(c *coordinator.Config) { c.Limits = api.Limits{MaxActiveLeases: -1} },
		"negative price":   func(c *coordinator.Config) { c.Prices = []coordinator.Price{{Provider: "fake", HourlyUSD: -1}} },
		"price w/o vendor": func(c *coordinator.Config) { c.Prices = []coordinator.Price{{HourlyUSD: 1}} },
	}
	for name, mutate := range tests {
		t.Run(name, func(t *testing.T) {
			cfg := good()
			mutate(&cfg)
			if _, err := coordinator.New(cfg); err == nil {
				t.Error("New succeeded")
			}
		})
	}
}
