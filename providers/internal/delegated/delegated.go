// Package delegated is what the delegated sandbox providers of crabbox
// (Daytona, E2B, Vercel) share of their configuration: the checks of the
// API URLs they are given.
//
// Like providers/internal/cloud for the VM clouds, it holds small
// functions, not a provider skeleton; each provider keeps its own options,
// defaults and error messages.
package delegated

import "net/url"

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
