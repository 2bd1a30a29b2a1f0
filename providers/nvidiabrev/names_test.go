package nvidiabrev

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/jonboulle/clockwork"

	"github.com/crabbox-dev/crabbox/providers/internal/cloud"
	"github.com/crabbox-dev/crabbox/providers/internal/cloud/cloudtest"
	"github.com/crabbox-dev/crabbox/providers/internal/tagcloud/tagcloudtest"
)

var ports = cloud.DefaultPorts()

// TestNameRoundTrip: the lifecycle labels survive the name exactly.
func TestNameRoundTrip(t *testing.T) {
	for _, l := range []map[string]string{
		{"lease": "cbx_0123456789ab", "state": "provisioning", "keep": "false", "expires_at": "1796645402", "slug": "tidal-lobster"},
		{"lease": "cbx_ffffffffffff", "state": "ready", "keep": "true", "expires_at": "0", "ssh_port": "22"},
		{"lease": "cbx_0000000000aa", "state": "released", "keep": "false", "expires_at": "78364164095", "ssh_port": "2222",
			"slug": strings.Repeat("a", MaxSlugLength)},
		{"lease": "cbx_0000000000aa", "state": "failed", "keep": "false", "expires_at": "1"},
		{"lease": "cbx_0000000000aa", "state": "running", "keep": "false", "expires_at": "1"},
	} {
		name, err := encodeName(l, ports)
		if err != nil {
			t.Fatalf("encode %v: %v", l, err)
		}
		if len(name) > MaxNameLength {
			t.Errorf("name %q is %d characters", name, len(name))
		}
		got, ok := decodeName(name, ports)
		if !ok {
			t.Fatalf("decode %q: not crabbox's", name)
		}
		want := map[string]string{"crabbox": "true", "created_by": "crabbox", "provider": Name, "target": "linux"}
		for k, v := range l {
			want[k] = v
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("labels of %q (-want +got):\n%s", name, diff)
		}
	}
}

// TestNotOurs: names that are not exactly crabbox's are nobody's.
func TestNotOurs(t *testing.T) {
	for _, n := range []string{
		"", "my-gpu-box", "crabbox-cbx-0123456789ab", "cbx-0123456789ab", "cbx-0123456789AB-rn0-0tpocgq",
		"cbx-0123456789ab-qn0-0tpocgq", "cbx-0123456789ab-rn0-0tpocg", "cbx-0123456789ab-rn0-0tpocgq-",
		"cbx-0123456789ab-rn0-0tpocgq-Slug", "cbx-0123456789ab-rn5-0tpocgq", // port index beyond the ports
	} {
		if l, ok := decodeName(n, ports); ok {
			t.Errorf("decodeName(%q) = %v, want not crabbox's", n, l)
		}
	}
}

// TestNameRefusals: labels a name cannot hold are refused, naming them.
func TestNameRefusals(t *testing.T) {
	base := func() map[string]string {
		return map[string]string{"lease": "cbx_0123456789ab", "state": "ready", "keep": "false", "expires_at": "1796645402"}
	}
	tests := []struct {
		edit func(map[string]string)
		want string
	}{
		{func(l map[string]string) { l["lease"] = "x" }, "lease"},
		{func(l map[string]string) { l["state"] = "odd" }, "state"},
		{func(l map[string]string) { l["expires_at"] = "78364164096" }, "expiry"},
		{func(l map[string]string) { l["ssh_port"] = "2200" }, "SSH port"},
		{func(l map[string]string) { l["slug"] = strings.Repeat("a", MaxSlugLength+1) }, "slug"},
	}
	for _, tt := range tests {
		l := base()
		tt.edit(l)
		if _, err := encodeName(l, ports); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("encodeName(%v) = %v, want an error about %s", l, err, tt.want)
		}
	}
}

// TestLifetime: Brev sets no lifetime on an instance, so a lease's TTL
// is not capped; an expiry is recorded to the second however far, and
// one beyond what the name holds (year 4453) is refused before any API
// call, not recorded wrong.
func TestLifetime(t *testing.T) {
	if s := (Provider{}).Spec(); s.LifetimeOption != "" {
		t.Errorf("LifetimeOption = %q, want none: Brev sets no lifetime", s.LifetimeOption)
	}
	e := newEnv(t, cloudtest.NewFleet(t), nil)
	b := e.Env.Backend(t, clockwork.NewRealClock())

	req := tagcloudtest.NewRequest(t, time.Now())
	req.TTL = 30 * 24 * time.Hour
	req.ExpiresAt = req.CreatedAt.Add(req.TTL)
	target, err := b.Acquire(t.Context(), req)
	if err != nil {
		t.Fatal(err)
	}
	if !target.ExpiresAt.Equal(req.ExpiresAt) {
		t.Errorf("ExpiresAt = %v, want %v", target.ExpiresAt, req.ExpiresAt)
	}
	release(t, b, target)

	req = tagcloudtest.NewRequest(t, time.Now())
	req.ExpiresAt = time.Unix(maxExpiry+1, 0)
	if _, err := b.Acquire(t.Context(), req); err == nil || !strings.Contains(err.Error(), "expiry") {
		t.Fatalf("Acquire with expiry %v: %v, want a refusal naming the expiry", req.ExpiresAt, err)
	}
	req = tagcloudtest.NewRequest(t, time.Now())
	req.Slug = strings.Repeat("s", MaxSlugLength+1)
	if _, err := b.Acquire(t.Context(), req); err == nil || !strings.Contains(err.Error(), "slug") {
		t.Fatalf("Acquire with a %d-character slug: %v, want a refusal naming the slug", len(req.Slug), err)
	}
	if n := len(e.fake.Creates()); n != 1 {
		t.Errorf("%d creates, want only the first lease's", n)
	}
	e.cloud.CheckReleased(t)
}
