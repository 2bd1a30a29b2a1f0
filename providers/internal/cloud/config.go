package cloud

import (
	"fmt"
	"net/netip"
	"os"
	"os/user"
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
