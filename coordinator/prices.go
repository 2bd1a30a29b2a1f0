package coordinator

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
)

// Price is the hourly price of a provider's server type. An empty
// ServerType is the provider's price for any server type without its own.
type Price struct {
	Provider   string
	ServerType string
	HourlyUSD  float64
}

// ParsePrices parses a price list like "hetzner/cx22=0.0096,aws=0.10":
// comma-separated provider[/serverType]=hourlyUSD entries. A provider
// without a server type prices all of its server types without an entry.
func ParsePrices(s string) ([]Price, error) {
	var out []Price
	seen := map[[2]string]bool{}
	for _, entry := range strings.Split(s, ",") {
		entry = strings.TrimSpace(entry)
		if entry == "" {
			continue
		}
		key, value, ok := strings.Cut(entry, "=")
		if !ok {
			return nil, fmt.Errorf("price %q: want provider[/serverType]=hourlyUSD", entry)
		}
		prov, serverType, _ := strings.Cut(strings.TrimSpace(key), "/")
		prov = strings.ToLower(prov)
		if !providerName.MatchString(prov) {
			return nil, fmt.Errorf("price %q: %q is not a provider name", entry, prov)
		}
		usd, err := strconv.ParseFloat(strings.TrimSpace(value), 64)
		if err != nil || usd < 0 || math.IsInf(usd, 0) || math.IsNaN(usd) {
			return nil, fmt.Errorf("price %q: %q is not a non-negative number of USD per hour", entry, value)
		}
		k := [2]string{prov, serverType}
		if seen[k] {
			return nil, fmt.Errorf("price %q: %s is priced twice", entry, key)
		}
		seen[k] = true
		out = append(out, Price{Provider: prov, ServerType: serverType, HourlyUSD: usd})
	}
	return out, nil
}

// price is the hourly price of a provider's server type: an exact entry,
// else the provider's catch-all entry, else 0.
func (s *Server) price(providerName, serverType string) float64 {
	p, _ := s.priceOf(providerName, serverType)
	return p
}

// priceOf is price, and whether an entry priced the type. The first of
// entries naming the same provider and server type applies.
func (s *Server) priceOf(providerName, serverType string) (float64, bool) {
	fallback, found := 0.0, false
	for _, p := range s.prices {
		if p.Provider != providerName {
			continue
		}
		if p.ServerType == serverType {
			return p.HourlyUSD, true
		}
		if p.ServerType == "" && !found {
			fallback, found = p.HourlyUSD, true
		}
	}
	return fallback, found
}

// warnUnusablePrices logs a warning for each price entry that can never
// apply, saying why, so that an operator's typo does not go unnoticed
// (New keeps such entries: they change nothing).
func (s *Server) warnUnusablePrices() {
	seen := map[[2]string]bool{}
	for _, p := range s.prices {
		if why := s.unusablePrice(p, seen); why != "" {
			s.log.Warn("price entry never applies: "+why, "provider", p.Provider, "serverType", p.ServerType, "hourlyUSD", p.HourlyUSD)
		}
	}
}

// unusablePrice says why price p can never apply, or "". A lease is
// priced by its provider's entries, and by its server type only when the
// coordinator chooses it (the provider's Sizing names server types); a
// client's claim of a server type is never priced. seen holds the entries
// before p.
func (s *Server) unusablePrice(p Price, seen map[[2]string]bool) string {
	key := [2]string{p.Provider, p.ServerType}
	if seen[key] {
		return "an earlier entry prices the same provider and server type"
	}
	seen[key] = true
	if _, ok := s.providers[p.Provider]; !ok {
		return fmt.Sprintf("provider %q is not configured on this coordinator", p.Provider)
	}
	if p.ServerType == "" {
		return ""
	}
	types := s.sizing[p.Provider].serverTypes()
	switch {
	case len(types) == 0:
		return fmt.Sprintf("provider %q has no server types this coordinator chooses, so only an entry without serverType prices its leases", p.Provider)
	case !slices.Contains(types, p.ServerType):
		return fmt.Sprintf("provider %q is never asked for server type %q (it is asked for %s)", p.Provider, p.ServerType, strings.Join(types, ", "))
	}
	return ""
}

// serverTypes are the server types the sizing may ask its provider for:
// the default's and those allowed, for any org.
func (z Sizing) serverTypes() []string {
	types := slices.Clone(z.Default.ServerTypes)
	types = append(types, z.Allowed["serverType"]...)
	for _, m := range z.Orgs {
		types = append(types, m["serverType"]...)
	}
	slices.Sort(types)
	return slices.Compact(types)
}
