package coordinator

import (
	"fmt"
	"math"
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

// priceOf is price, and whether an entry priced the type.
func (s *Server) priceOf(providerName, serverType string) (float64, bool) {
	fallback, found := 0.0, false
	for _, p := range s.prices {
		if p.Provider != providerName {
			continue
		}
		if p.ServerType == serverType {
			return p.HourlyUSD, true
		}
		if p.ServerType == "" {
			fallback, found = p.HourlyUSD, true
		}
	}
	return fallback, found
}
