package coordinator

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/crabbox-dev/crabbox/coordinator/store"
	"github.com/crabbox-dev/crabbox/provider"
)

// A provider's quoted price (LabelHourlyUSD) prices a lease the operator
// priced at nothing, and only such a lease; a label that is no positive
// number changes nothing.
func TestApplyTargetProviderPrice(t *testing.T) {
	for _, tt := range []struct {
		name              string
		configured, label string
		wantHourly        float64
		wantMax           float64
	}{
		{"unpriced lease takes the quote", "", "0.44", 0.44, 0.88},
		{"operator's price wins", "0.10", "0.44", 0.10, 0.20},
		{"not a number", "", "cheap", 0, 0},
		{"negative", "", "-1", 0, 0},
		{"infinite", "", "+Inf", 0, 0},
		{"no label", "", "", 0, 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			l := store.Lease{TTLSeconds: 7200}
			if tt.configured != "" {
				l.EstimatedHourlyUSD, l.MaxEstimatedUSD = 0.10, 0.20
			}
			applyTarget(&l, provider.LeaseTarget{Labels: map[string]string{provider.LabelHourlyUSD: tt.label}})
			if diff := cmp.Diff([2]float64{tt.wantHourly, tt.wantMax}, [2]float64{l.EstimatedHourlyUSD, l.MaxEstimatedUSD}); diff != "" {
				t.Errorf("estimated hourly and max USD (-want +got):\n%s", diff)
			}
		})
	}
}
