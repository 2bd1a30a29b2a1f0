// Package hexid checks the shape of crabbox's random IDs: a prefix and a
// fixed number of lowercase hex digits (cbx_0123456789ab). It is a loop,
// not a regexp, because every crabbox command links it and a regexp
// compiled at start costs each one.
package hexid

import "strings"

// Valid reports whether s is prefix followed by exactly n lowercase hex
// digits.
func Valid(s, prefix string, n int) bool {
	rest, ok := strings.CutPrefix(s, prefix)
	if !ok || len(rest) != n {
		return false
	}
	for i := 0; i < len(rest); i++ {
		if c := rest[i]; !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}
