package cloud

import (
	"fmt"
	"net/netip"
	"net/url"
	"os"
	"os/user"
	"strings"
	"time"

	"github.com/crabbox-dev/crabbox/lease"
	"github.com/crabbox-dev/crabbox/provider"
)

// CurrentUser is the name of the user running crabbox: the default owner
// label of the boxes it makes. It is empty when neither the system nor
// $USER knows.
func CurrentUser() string {
	if u, err := user.Current(); err == nil && u.Username != "" {
		return u.Username
	}
	return os.Getenv("USER")
}

// CheckIPv4Range reports whether s is an IPv4 network in CIDR form with
// its host bits zero, as the clouds' firewall rules take them.
func CheckIPv4Range(s string) error {
	p, err := netip.ParsePrefix(s)
	if err != nil || !p.Addr().Is4() || p.Masked() != p {
		return fmt.Errorf("%q is not an IPv4 network in CIDR form (like 203.0.113.7/32)", s)
	}
	return nil
}

// CheckSourceRange reports whether s is a network in CIDR form with its
// host bits zero, IPv4 or IPv6 (2001:db8::/32), for the clouds whose
// firewalls take both. Clouds that take only IPv4 use CheckIPv4Range.
func CheckSourceRange(s string) error {
	p, err := netip.ParsePrefix(s)
	if err != nil || p.Masked() != p {
		return fmt.Errorf("%q is not a network in CIDR form with its host bits zero (like 203.0.113.7/32 or 2001:db8::/32)", s)
	}
	return nil
}

// NoSourceRange is Acquire's error when the option naming the network
// allowed to reach the boxes' SSH ports (name, set with flag) is unset.
func NoSourceRange(providerName, name, flag string) error {
	return fmt.Errorf("%s provider: option %s is required to create boxes (--%s): the network allowed to reach their SSH ports, e.g. 203.0.113.7/32 (0.0.0.0/0 allows anyone; boxes accept only the lease's key): %w",
		providerName, name, flag, provider.ErrPrecondition)
}

// DiskSize returns gb, or def when gb is zero, and fails when the result
// is outside lo to hi; unit ("GB", "GiB") names the cloud's unit in the
// error.
func DiskSize(gb, def, lo, hi int, unit string) (int, error) {
	if gb == 0 {
		gb = def
	}
	if gb < lo || gb > hi {
		return gb, fmt.Errorf("%d is outside %d to %d %s", gb, lo, hi, unit)
	}
	return gb, nil
}

// MarketSpot is the market option's value for a cloud's spot (or
// preemptible) capacity: cheaper, but possibly out of capacity, so a box
// falls back to the cloud's regular market then.
const MarketSpot = "spot"

// CheckMarket returns the market option's value, MarketSpot when empty,
// and fails unless it is MarketSpot or regular, the cloud's own name for
// its regular market ("on-demand", "standard", "regular").
func CheckMarket(market, regular string) (string, error) {
	switch market {
	case "":
		return MarketSpot, nil
	case MarketSpot, regular:
		return market, nil
	}
	return market, fmt.Errorf("%q is not %s or %s", market, MarketSpot, regular)
}

// Markets are the markets to try in order for the checked market option:
// spot, then regular when there is no spot capacity; or regular alone.
func Markets(market, regular string) []string {
	if market == MarketSpot {
		return []string{MarketSpot, regular}
	}
	return []string{regular}
}

// CheckEndpoint reports whether s is usable as a cloud API endpoint: an
// absolute http or https URL with a host, and without user information,
// query or fragment (credentials never travel in it; they come from the
// provider's own source).
func CheckEndpoint(s string) error {
	u, err := url.Parse(s)
	switch {
	case err != nil:
		return fmt.Errorf("%q is not a URL: %w", s, err)
	case u.Scheme != "http" && u.Scheme != "https", u.Host == "":
		return fmt.Errorf("%q is not an http or https URL with a host (like https://api.example.com)", s)
	case u.User != nil:
		return fmt.Errorf("endpoint %s carries user information: credentials never go in the endpoint", u.Redacted())
	case u.RawQuery != "" || u.Fragment != "" || strings.HasSuffix(s, "?") || strings.HasSuffix(s, "#"):
		return fmt.Errorf("%q has a query or fragment: want the API's base URL", s)
	}
	return nil
}

// EndpointOption is the option, set with --<providerName>-endpoint, that
// points a cloud provider at another API endpoint than its cloud's own:
// an API-compatible cloud, a proxy or a local fake. It locates leases,
// since their boxes are reachable only through it.
func EndpointOption(providerName, cloudName, note string) provider.Option {
	help := "API endpoint URL (default: " + cloudName + "'s), for an API-compatible service, a proxy or a local fake"
	if note != "" {
		help += "; " + note
	}
	return provider.Option{Name: "endpoint", Flag: providerName + "-endpoint", Help: help, Locates: true}
}

// CheckAcquire checks what every cloud's Acquire needs of its request: a
// crabbox lease ID, a parseable lease public key and an expiry after now.
func CheckAcquire(req provider.AcquireRequest, now time.Time) error {
	if !lease.IsID(req.LeaseID) {
		return fmt.Errorf("lease ID %q is not a crabbox lease ID", req.LeaseID)
	}
	if _, err := lease.ParsePublicKey(req.PublicKey); err != nil {
		return fmt.Errorf("lease public key: %w", err)
	}
	if !req.ExpiresAt.After(now) {
		return fmt.Errorf("expiry %s is not after now (%s)", req.ExpiresAt.Format(time.RFC3339), now.Format(time.RFC3339))
	}
	return nil
}

// BoxOptions are the options every VM cloud has after its own, in this
// order: prepared, work-root, owner and boot-timeout. ownerHelp says what
// the owner option sets ("owner tag on servers"); box names what boots
// ("server"); bootTimeout is the boot-timeout default.
func BoxOptions(providerName, ownerHelp, box string, bootTimeout time.Duration) []provider.Option {
	flag := func(name string) string { return providerName + "-" + name }
	return []provider.Option{
		{Name: "prepared", Flag: flag("prepared"), Default: "false", Bool: true, Help: "the image already has git and tar: install nothing at boot"},
		{Name: "work-root", Flag: flag("work-root"), Default: DefaultWorkRoot, Help: "work root on the box", Locates: true},
		{Name: "owner", Flag: flag("owner"), Help: ownerHelp + " (default: the OS user)"},
		{Name: "boot-timeout", Flag: flag("boot-timeout"), Default: bootTimeout.String(),
			Help: "how long to wait for a new " + box + "'s address and SSH"},
	}
}
