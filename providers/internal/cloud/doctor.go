package cloud

import (
	"strings"

	"github.com/crabbox-dev/crabbox/provider"
)

// SourceRangeCheck is doctor's check of the option (name, set with flag)
// naming the network allowed to reach the boxes' SSH ports, which creating
// a box needs.
func SourceRangeCheck(name, flag, value string) provider.Check {
	c := provider.Check{Name: name}
	if value == "" {
		env := "CRABBOX_" + strings.ToUpper(strings.ReplaceAll(flag, "-", "_"))
		c.Detail = "not set: set --" + flag + " or " + env + " to the network allowed to reach the boxes' SSH ports, e.g. 203.0.113.7/32 (0.0.0.0/0 allows anyone; boxes accept only the lease's key)"
		return c
	}
	c.OK, c.Detail = true, value
	return c
}
