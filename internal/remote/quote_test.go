package remote_test

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/crabbox-dev/crabbox/internal/remote"
)

func TestQuote(t *testing.T) {
	tests := []struct{ in, want string }{
		{"", "''"},
		{"plain", "plain"},
		{"a/b.c-d_e:f,g@h%i+j", "a/b.c-d_e:f,g@h%i+j"},
		{"a b", "'a b'"},
		{"it's", `'it'\''s'`},
		{"a=b", "'a=b'"},
		{"~", "'~'"},
		{"$x", "'$x'"},
		{"x\ny", "'x\ny'"},
	}
	for _, tt := range tests {
		if got := remote.Quote(tt.in); got != tt.want {
			t.Errorf("Quote(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

// FuzzQuote checks that sh reads Quote(s) back as exactly s.
func FuzzQuote(f *testing.F) {
	sh, err := exec.LookPath("sh")
	if err != nil {
		f.Skip("no sh")
	}
	for _, s := range []string{"", "a b", "it's", "''", `\'`, "$(id)", "`id`", "x\ny", "*", "~", "é\xff", "-n", "!"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if strings.ContainsRune(s, 0) {
			t.Skip("arguments cannot hold NUL")
		}
		out, err := exec.Command(sh, "-c", "printf %s "+remote.Quote(s)).Output()
		if err != nil {
			t.Fatalf("sh -c printf %%s %s: %v", remote.Quote(s), err)
		}
		if string(out) != s {
			t.Errorf("sh read Quote(%q) = %s back as %q", s, remote.Quote(s), out)
		}
	})
}
