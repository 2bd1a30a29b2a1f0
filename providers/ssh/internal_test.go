package ssh

import (
	"os/exec"
	"path"
	"runtime"
	"strings"
	"testing"
	"time"
	"unicode"

	"github.com/crabbox-dev/crabbox/internal/remote"

	"github.com/google/go-cmp/cmp"

	"github.com/crabbox-dev/crabbox/provider"
)

func TestDecide(t *testing.T) {
	now := time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC)
	base := record{LeaseID: "cbx_0123456789ab", Slug: "calm-crab", ExpiresAt: now}
	claimedAll := func(string) bool { return true }
	tests := []struct {
		name    string
		change  func(*record)
		claimed func(string) bool
		want    provider.CleanupDecision
	}{
		{"expired and claimed", nil, claimedAll,
			provider.CleanupDecision{Delete: true, Reason: "expired at 2030-01-01T12:00:00Z"}},
		{"not claimed", nil, func(string) bool { return false },
			provider.CleanupDecision{Reason: "no local claim: another client's lease"}},
		{"no claim function", nil, nil,
			provider.CleanupDecision{Reason: "no local claim: another client's lease"}},
		{"kept and expired", func(r *record) { r.Keep = true }, claimedAll,
			provider.CleanupDecision{Delete: true, Reason: "expired at 2030-01-01T12:00:00Z"}},
		{"kept and live", func(r *record) { r.Keep, r.ExpiresAt = true, now.Add(time.Second) }, claimedAll,
			provider.CleanupDecision{Reason: "kept (keep=true) while live until 2030-01-01T12:00:01Z"}},
		{"kept, expired, not claimed", func(r *record) { r.Keep = true }, func(string) bool { return false },
			provider.CleanupDecision{Reason: "no local claim: another client's lease"}},
		{"kept, no expiry", func(r *record) { r.Keep, r.ExpiresAt = true, time.Time{} }, claimedAll,
			provider.CleanupDecision{Reason: "no expiry recorded"}},
		{"live", func(r *record) { r.ExpiresAt = now.Add(time.Second) }, claimedAll,
			provider.CleanupDecision{Reason: "live until 2030-01-01T12:00:01Z"}},
		{"no expiry", func(r *record) { r.ExpiresAt = time.Time{} }, claimedAll,
			provider.CleanupDecision{Reason: "no expiry recorded"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := base
			if tt.change != nil {
				tt.change(&r)
			}
			want := tt.want
			want.LeaseID, want.Slug = r.LeaseID, r.Slug
			if diff := cmp.Diff(want, decide(r, tt.claimed, now)); diff != "" {
				t.Errorf("decide (-want +got):\n%s", diff)
			}
		})
	}
}

func TestShellQuoteSurvivesSh(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("needs a POSIX sh")
	}
	for _, s := range []string{"", "plain", "with space", "it's", `"dq" $HOME $(id) ; | & * ? ~ #`, "'''", "new\nline"} {
		out, err := exec.Command("sh", "-c", "printf %s "+remote.Quote(s)).Output()
		if err != nil {
			t.Fatalf("sh with %q: %v", s, err)
		}
		if string(out) != s {
			t.Errorf("sh printed %q for remote.Quote(%q), want it unchanged", out, s)
		}
	}
}

func TestScriptsAvoidShellSpecials(t *testing.T) {
	for name, script := range map[string]string{"prepare": prepareScript, "remove": removeScript} {
		if strings.ContainsAny(script, "'!\n\\") {
			t.Errorf("%s script contains a single quote, !, backslash or newline, which some login shells mangle: %s", name, script)
		}
	}
}

func FuzzCheckWorkRoot(f *testing.F) {
	for _, s := range []string{"/work/crabbox", "/", "/..", "relative", "/a/../b/", `/a\b`, "/a\x00b", "//", "/ spaced /dir"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, root string) {
		got, err := checkWorkRoot(root)
		if err != nil {
			return
		}
		if got == "/" || !path.IsAbs(got) || path.Clean(got) != got {
			t.Fatalf("checkWorkRoot(%q) = %q: not an absolute clean path other than /", root, got)
		}
		if strings.ContainsFunc(got, unicode.IsControl) || strings.Contains(got, `\`) {
			t.Fatalf("checkWorkRoot(%q) = %q: contains characters it should reject", root, got)
		}
		dir, err := record{LeaseID: "cbx_0123456789ab", WorkRoot: root}.leaseDir()
		if err != nil || path.Dir(dir) != got {
			t.Fatalf("leaseDir of work root %q = %q, %v; want a direct child of %q", root, dir, err, got)
		}
	})
}
