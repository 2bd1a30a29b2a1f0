package coordinator_test

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/crabbox-dev/crabbox/coordinator"
	"github.com/crabbox-dev/crabbox/coordinator/auth"
	"github.com/crabbox-dev/crabbox/coordinator/store/sqlite"
	"github.com/crabbox-dev/crabbox/provider"
)

// A price entry that can never apply is a warning when the server is made,
// naming the entry and why; entries that can apply say nothing.
func TestPricesThatNeverApplyAreWarnings(t *testing.T) {
	st, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "c.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	var logs bytes.Buffer
	_, err = coordinator.New(coordinator.Config{
		Store:     st,
		Providers: map[string]provider.SSHLeaseBackend{"local": newFake(), "cloud": newFake()},
		Tokens:    auth.Config{AdminToken: adminToken, DefaultOrg: "acme"},
		Sizing: map[string]coordinator.Sizing{"cloud": {
			Default: coordinator.Size{ServerTypes: []string{"cx22"}}, Allowed: map[string][]string{"serverType": {"cx32"}},
			Orgs:      map[string]map[string][]string{"big": {"serverType": {"cx52"}}},
			Configure: func(coordinator.Size) (provider.SSHLeaseBackend, error) { return newFake(), nil },
		}},
		Prices: []coordinator.Price{
			{Provider: "local", HourlyUSD: 0},                      // applies
			{Provider: "local", ServerType: "small", HourlyUSD: 1}, // local has no server types
			{Provider: "cloud", ServerType: "cx22", HourlyUSD: 0.01},
			{Provider: "cloud", ServerType: "cx32", HourlyUSD: 0.02},
			{Provider: "cloud", ServerType: "cx52", HourlyUSD: 0.04},
			{Provider: "cloud", ServerType: "cx99", HourlyUSD: 9},    // never asked for
			{Provider: "cloud", ServerType: "cx22", HourlyUSD: 0.03}, // shadowed
			{Provider: "aws", HourlyUSD: 0.1},                        // not configured
		},
		Logger: slog.New(slog.NewJSONHandler(&logs, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	type warning struct {
		Level, Msg, Provider, ServerType string
		HourlyUSD                        float64
	}
	var got []warning
	dec := json.NewDecoder(&logs)
	for dec.More() {
		var w warning
		if err := dec.Decode(&w); err != nil {
			t.Fatal(err)
		}
		got = append(got, w)
	}
	want := []warning{
		{"WARN", `price entry never applies: provider "local" has no server types this coordinator chooses, so only an entry without serverType prices its leases`, "local", "small", 1},
		{"WARN", `price entry never applies: provider "cloud" is never asked for server type "cx99" (it is asked for cx22, cx32, cx52)`, "cloud", "cx99", 9},
		{"WARN", "price entry never applies: an earlier entry prices the same provider and server type", "cloud", "cx22", 0.03},
		{"WARN", `price entry never applies: provider "aws" is not configured on this coordinator`, "aws", "", 0.1},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("startup log (-want +got):\n%s", diff)
	}
}
