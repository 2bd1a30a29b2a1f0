// Package retryafter reads the Retry-After header of an HTTP answer
// (RFC 9110, section 10.2.3), which the providers' API clients honour
// when a service refuses a request for now (429, 503).
package retryafter

import (
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Parse returns the wait the header value v asks for: a number of
// seconds, or an HTTP date (a date already past is no wait), measured
// from now. ok is false when v is empty or neither form, for the caller
// to use its own backoff.
func Parse(v string, now time.Time) (d time.Duration, ok bool) {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0, false
	}
	if s, err := strconv.Atoi(v); err == nil && s >= 0 {
		return time.Duration(s) * time.Second, true
	}
	if t, err := http.ParseTime(v); err == nil {
		return max(t.Sub(now), 0), true
	}
	return 0, false
}
