// Package delegated is what the delegated sandbox providers of crabbox
// share: the checks of the API URLs they are given, and how an HTTP
// answer's status maps to crabbox's error kinds.
//
// Like providers/internal/cloud for the VM clouds, it holds small
// functions, not a provider skeleton; each provider keeps its own options,
// defaults and error messages.
package delegated

import (
	"net/http"
	"net/url"

	"github.com/crabbox-dev/crabbox/provider"
)

// ParseHTTPURL parses v and reports whether it is an http or https URL
// with a host.
func ParseHTTPURL(v string) (*url.URL, bool) {
	u, err := url.Parse(v)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
		return nil, false
	}
	return u, true
}

// ParseBaseURL parses v and reports whether it is the base URL of an HTTP
// API, one that paths are appended to: an http or https URL with a host
// and without a query or fragment.
func ParseBaseURL(v string) (*url.URL, bool) {
	u, ok := ParseHTTPURL(v)
	if !ok || u.RawQuery != "" || u.Fragment != "" {
		return nil, false
	}
	return u, true
}

// StatusIs reports whether an HTTP answer of status is an error of the
// portable kind target: 404 not found, 401 and 403 unauthenticated, 409
// conflict, 429 and 5xx transient. It is what the sandbox APIs' error
// types answer errors.Is with, besides kinds of their own.
func StatusIs(status int, target error) bool {
	switch target {
	case provider.ErrNotFound:
		return status == http.StatusNotFound
	case provider.ErrUnauthenticated:
		return status == http.StatusUnauthorized || status == http.StatusForbidden
	case provider.ErrConflict:
		return status == http.StatusConflict
	case provider.ErrTransient:
		return status == http.StatusTooManyRequests || status >= 500
	}
	return false
}
