package delegated_test

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/crabbox-dev/crabbox/internal/testenv"
	"github.com/crabbox-dev/crabbox/provider"
	"github.com/crabbox-dev/crabbox/providers/internal/delegated"
)

func TestMain(m *testing.M) { testenv.Main(m, nil) }

func TestParseURL(t *testing.T) {
	for _, tc := range []struct {
		in         string
		http, base bool
	}{
		{"https://api.example.com", true, true},
		{"http://127.0.0.1:8080/v1", true, true},
		{"https://user:pw@api.example.com/", true, true},
		{"https://api.example.com/?q=1", true, false},
		{"https://api.example.com/#frag", true, false},
		{"ftp://api.example.com", false, false},
		{"api.example.com", false, false},
		{"https://", false, false},
		{"", false, false},
		{"http://[::1", false, false},
	} {
		if _, ok := delegated.ParseHTTPURL(tc.in); ok != tc.http {
			t.Errorf("ParseHTTPURL(%q) ok = %v, want %v", tc.in, ok, tc.http)
		}
		u, ok := delegated.ParseBaseURL(tc.in)
		if ok != tc.base {
			t.Errorf("ParseBaseURL(%q) ok = %v, want %v", tc.in, ok, tc.base)
		}
		if ok != (u != nil) {
			t.Errorf("ParseBaseURL(%q) = %v, %v: a URL exactly when ok", tc.in, u, ok)
		}
	}
}

func TestStatusIs(t *testing.T) {
	kinds := map[string]error{
		"not-found": provider.ErrNotFound, "unauthenticated": provider.ErrUnauthenticated,
		"conflict": provider.ErrConflict, "transient": provider.ErrTransient, "capacity": provider.ErrCapacity,
	}
	want := map[int][]string{
		400: nil, 401: {"unauthenticated"}, 402: nil, 403: {"unauthenticated"}, 404: {"not-found"},
		409: {"conflict"}, 422: nil, 429: {"transient"}, 500: {"transient"}, 503: {"transient"},
	}
	for status, wantKinds := range want {
		var got []string
		for _, name := range []string{"capacity", "conflict", "not-found", "transient", "unauthenticated"} {
			if delegated.StatusIs(status, kinds[name]) {
				got = append(got, name)
			}
		}
		if diff := cmp.Diff(wantKinds, got); diff != "" {
			t.Errorf("kinds of HTTP %d (-want +got):\n%s", status, diff)
		}
	}
}
