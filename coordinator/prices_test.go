package coordinator

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestParsePrices(t *testing.T) {
	got, err := ParsePrices(" hetzner/cx22=0.0096, AWS=0.10 ,,gcp/e2-small=0")
	if err != nil {
		t.Fatal(err)
	}
	want := []Price{{"hetzner", "cx22", 0.0096}, {"aws", "", 0.10}, {"gcp", "e2-small", 0}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("prices (-want +got):\n%s", diff)
	}
	for _, bad := range []string{"hetzner", "hetzner=-1", "hetzner=x", "=1", "a b=1", "aws=1,aws=2", "aws=NaN", "aws=Inf"} {
		if _, err := ParsePrices(bad); err == nil {
			t.Errorf("ParsePrices(%q) succeeded", bad)
		}
	}
	s := &Server{prices: want}
	for _, tt := range []struct {
		provider, serverType string
		want                 float64
	}{{"hetzner", "cx22", 0.0096}, {"hetzner", "cx32", 0}, {"aws", "t3.large", 0.10}, {"azure", "", 0}} {
		if got := s.price(tt.provider, tt.serverType); got != tt.want {
			t.Errorf("price(%s, %s) = %v, want %v", tt.provider, tt.serverType, got, tt.want)
		}
	}
}
