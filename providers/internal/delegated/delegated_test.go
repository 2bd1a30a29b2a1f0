package delegated_test

import (
	"testing"

	"github.com/crabbox-dev/crabbox/internal/testenv"
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
