package coordinator_test

import (
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/crabbox-dev/crabbox/coordinator"
	"github.com/crabbox-dev/crabbox/coordinator/api"
	"github.com/crabbox-dev/crabbox/provider"
)

func withSizing(name string, z coordinator.Sizing) option {
	return func(c *coordinator.Config) {
		if c.Sizing == nil {
			c.Sizing = map[string]coordinator.Sizing{}
		}
		c.Sizing[name] = z
	}
}

// sizedBackends is a Configure that hands out one fake backend per size.
type sizedBackends struct {
	mu sync.Mutex
	m  map[string]*fakeBackend
}

func sizeKey(z coordinator.Size) string {
	return z.Class + "|" + z.Image + "|" + z.Location + "|" + strings.Join(z.ServerTypes, ",")
}

func (s *sizedBackends) configure(z coordinator.Size) (provider.SSHLeaseBackend, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.m == nil {
		s.m = map[string]*fakeBackend{}
	}
	b, ok := s.m[sizeKey(z)]
	if !ok {
		b = newFake()
		s.m[sizeKey(z)] = b
	}
	return b, nil
}

func (s *sizedBackends) get(z coordinator.Size) *fakeBackend {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.m[sizeKey(z)]
}

// A lease may ask for its own server type and location within what the
// configuration allows (per org); the provider is configured for that
// size, the lease records it, its price is the size's, and its touches
// and deletion go to the same backend.
func TestPerLeaseSizing(t *testing.T) {
	eachStore(t, func(t *testing.T, open opener) {
		var sized sizedBackends
		e := simple(t, open,
			withSizing(fakeProvider, coordinator.Sizing{
				Default:   coordinator.Size{Location: "fsn1", ServerTypes: []string{"cx22"}},
				Allowed:   map[string][]string{"serverType": {"cx32", "cx42"}, "location": {"nbg1"}},
				Orgs:      map[string]map[string][]string{"small": {"serverType": {"cx32"}}},
				Configure: sized.configure,
			}),
			withPrices(coordinator.Price{Provider: fakeProvider, ServerType: "cx22", HourlyUSD: 0.01},
				coordinator.Price{Provider: fakeProvider, ServerType: "cx32", HourlyUSD: 0.02},
				coordinator.Price{Provider: fakeProvider, ServerType: "cx42", HourlyUSD: 0.04}))
		alice := e.token("alice", "acme")

		req := leaseReq(t)
		req.ServerType, req.Class = "", "beast" // no classes configured: the class is the client's label
		def := e.create(alice, req)
		if a, _ := e.fake.counts(); a[def.ID] != 1 || def.ServerType != "cx22" || def.Location != "fsn1" || def.Class != "beast" || def.EstimatedHourlyUSD != 0.01 {
			t.Errorf("default lease %s/%s/%s at %v, acquired %v: want the configured backend's cx22 in fsn1, class beast", def.Class, def.ServerType, def.Location, def.EstimatedHourlyUSD, a)
		}

		req = leaseReq(t)
		req.ServerType, req.Location = "cx42", "nbg1"
		big := e.create(alice, req)
		want := coordinator.Size{Location: "nbg1", ServerTypes: []string{"cx42"}}
		b := sized.get(want)
		if b == nil {
			t.Fatalf("no backend configured for %+v", want)
		}
		if a, _ := b.counts(); a[big.ID] != 1 || big.ServerType != "cx42" || big.Location != "nbg1" || big.EstimatedHourlyUSD != 0.04 {
			t.Errorf("sized lease %s/%s at %v, acquired %v", big.ServerType, big.Location, big.EstimatedHourlyUSD, a)
		}
		if a, _ := e.fake.counts(); a[big.ID] != 0 {
			t.Errorf("the default backend created the sized lease")
		}

		for _, tc := range []struct {
			token, field, value, want string
		}{
			{alice, "serverType", "cx99", "cx32, cx42"},
			{alice, "image", "debian-13", `only its configured default`},
			{e.token("carol", "small"), "serverType", "cx42", "cx32"},
		} {
			req := leaseReq(t)
			switch tc.field {
			case "serverType":
				req.ServerType = tc.value
			case "image":
				req.ServerType, req.Image = "", api.ImageRef(tc.value)
			}
			ae := e.fail("POST", "/v1/leases", tc.token, req, http.StatusBadRequest, api.CodeInvalidRequest)
			if !strings.Contains(ae.Message, `"`+tc.field+`"`) || !strings.Contains(ae.Message, tc.value) || !strings.Contains(ae.Message, tc.want) {
				t.Errorf("%s=%s: message %q does not name the field, value and %q", tc.field, tc.value, ae.Message, tc.want)
			}
		}

		e.do("POST", leasePath(def.ID, "/release"), alice, nil, http.StatusOK, nil)
		e.do("POST", leasePath(big.ID, "/heartbeat"), alice, nil, http.StatusOK, nil)
		e.do("POST", leasePath(big.ID, "/release"), alice, nil, http.StatusOK, nil)
		if _, err := e.srv.Maintain(t.Context()); err != nil {
			t.Fatal(err)
		}
		_, rel := b.counts()
		if diff := cmp.Diff(map[string]int{big.ID: 1}, rel); diff != "" {
			t.Errorf("sized backend deletions (-want +got):\n%s", diff)
		}
		if _, rel := e.fake.counts(); rel[def.ID] != 1 {
			t.Errorf("default backend deletions %v, want the default lease's", rel)
		}
		if n := b.touches(big.ID); n != 0 {
			t.Errorf("released lease touched %d times", n) // its touch was dropped on release
		}
	})
}

// With a monthly USD limit, a create whose server type (the one the
// coordinator asks the provider for, not the client's claim) has no price
// is refused, naming the type and the config key; the estimate is the
// dearest type the provider may fall back to.
func TestSpendLimitFailsClosed(t *testing.T) {
	limit := withLimits(api.Limits{MaxMonthlyUSD: 100})
	cases := []struct {
		name   string
		opts   []option
		claim  string   // the request's serverType
		hourly float64  // estimate when created
		want   []string // message parts when refused
	}{
		{
			name: "a fallback type without a price",
			opts: []option{limit, withSizing(fakeProvider, coordinator.Sizing{Default: coordinator.Size{ServerTypes: []string{"cx22", "cx32"}}}),
				withPrices(coordinator.Price{Provider: fakeProvider, ServerType: "cx22", HourlyUSD: 0.01})},
			want: []string{`"cx32"`, `"prices"`, `"serverType": "cx32"`},
		},
		{
			name: "priced by the dearest type",
			opts: []option{limit, withSizing(fakeProvider, coordinator.Sizing{Default: coordinator.Size{ServerTypes: []string{"cx22", "cx32"}}}),
				withPrices(coordinator.Price{Provider: fakeProvider, ServerType: "cx22", HourlyUSD: 0.01},
					coordinator.Price{Provider: fakeProvider, ServerType: "cx32", HourlyUSD: 0.03})},
			hourly: 0.03,
		},
		{
			name:  "unknown type, the client's claim priced only",
			opts:  []option{limit, withPrices(coordinator.Price{Provider: fakeProvider, ServerType: "cx22", HourlyUSD: 0.01})},
			claim: "cx22",
			want:  []string{`provider "fake"`, `"prices"`},
		},
		{
			name:   "unknown type, catch-all price",
			opts:   []option{limit, withPrices(coordinator.Price{Provider: fakeProvider, HourlyUSD: 0.5})},
			hourly: 0.5,
		},
		{
			name: "no limit, no price",
			opts: []option{withSizing(fakeProvider, coordinator.Sizing{Default: coordinator.Size{ServerTypes: []string{"cx22"}}})},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			eachStore(t, func(t *testing.T, open opener) {
				e := simple(t, open, tc.opts...)
				alice := e.token("alice", "acme")
				req := leaseReq(t)
				req.ServerType = tc.claim
				if tc.want == nil {
					if l := e.create(alice, req); l.EstimatedHourlyUSD != tc.hourly {
						t.Errorf("estimate %v, want %v", l.EstimatedHourlyUSD, tc.hourly)
					}
					return
				}
				ae := e.fail("POST", "/v1/leases", alice, req, http.StatusFailedDependency, api.CodeProviderNotConfigured)
				for _, part := range tc.want {
					if !strings.Contains(ae.Message, part) {
						t.Errorf("message %q does not contain %s", ae.Message, part)
					}
				}
				if a, _ := e.fake.counts(); len(a) != 0 {
					t.Errorf("refused create reached the provider: %v", a)
				}
			})
		})
	}
}
