package cloud_test

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/crabbox-dev/crabbox/provider"
	"github.com/crabbox-dev/crabbox/providers/internal/cloud"
)

var (
	created = time.Date(2026, 11, 30, 7, 0, 0, 0, time.UTC)
	expires = created.Add(30 * time.Minute)
)

func acquireRequest() provider.AcquireRequest {
	return provider.AcquireRequest{
		LeaseID: "cbx_0123456789ab", Slug: "tidal-lobster", PublicKey: "ssh-ed25519 AAAA",
		TTL: 90 * time.Minute, IdleTimeout: 30 * time.Minute, CreatedAt: created, ExpiresAt: expires,
		Labels: map[string]string{"suite": "conformance", "branch": "feature/x y"},
	}
}

func TestNewLabels(t *testing.T) {
	hk := newHostKey(t)
	got, err := cloud.NewLabels(acquireRequest(), cloud.LabelOptions{
		Provider: "hetzner", ServerType: "cx23", Owner: "Alice Doe <alice@example.com>", Class: "standard", HostKey: hk.PublicKey(),
	})
	if err != nil {
		t.Fatal(err)
	}
	hkLabel, _ := cloud.HostKeyLabel(hk.PublicKey())
	want := map[string]string{
		"crabbox": "true", "created_by": "crabbox", "provider": "hetzner", "lease": "cbx_0123456789ab",
		"slug": "tidal-lobster", "owner": "Alice_Doe__alice_example.com", "class": "standard",
		"server_type": "cx23", "target": "linux", "keep": "false", "state": "provisioning",
		"created_at": "1796022000", "last_touched_at": "1796022000", "expires_at": "1796023800",
		"idle_timeout_secs": "1800", "ttl_secs": "5400", "host_key": hkLabel,
		"suite": "conformance", "branch": "feature_x_y",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("NewLabels (-want +got):\n%s", diff)
	}
	for k, v := range got {
		if err := cloud.CheckKey(k); err != nil {
			t.Errorf("key %q: %v", k, err)
		}
		if v != cloud.SanitizeValue(v) {
			t.Errorf("value %s=%q is not sanitised", k, v)
		}
	}
}

func TestNewLabelsRejects(t *testing.T) {
	tests := []struct {
		name    string
		change  func(*provider.AcquireRequest, *cloud.LabelOptions)
		wantErr string
	}{
		{"bad lease ID", func(r *provider.AcquireRequest, _ *cloud.LabelOptions) { r.LeaseID = "cbx_xyz" }, `lease ID "cbx_xyz"`},
		{"no provider", func(_ *provider.AcquireRequest, o *cloud.LabelOptions) { o.Provider = "" }, "no provider"},
		{"no creation time", func(r *provider.AcquireRequest, _ *cloud.LabelOptions) { r.CreatedAt = time.Time{} }, "no creation time"},
		{"no expiry", func(r *provider.AcquireRequest, _ *cloud.LabelOptions) { r.ExpiresAt = time.Time{} }, "no expiry"},
		{"negative TTL", func(r *provider.AcquireRequest, _ *cloud.LabelOptions) { r.TTL = -time.Second }, "negative TTL"},
		{"reserved caller label", func(r *provider.AcquireRequest, _ *cloud.LabelOptions) { r.Labels["keep"] = "true" }, `label "keep" is reserved`},
		{"bad caller key", func(r *provider.AcquireRequest, _ *cloud.LabelOptions) { r.Labels["my key"] = "x" }, `label key "my key": character ' '`},
		{"long caller key", func(r *provider.AcquireRequest, _ *cloud.LabelOptions) { r.Labels[strings.Repeat("k", 64)] = "x" }, "1 to 63 characters"},
		{"caller key edge", func(r *provider.AcquireRequest, _ *cloud.LabelOptions) { r.Labels["_x"] = "x" }, "start and end with a letter or digit"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req, o := acquireRequest(), cloud.LabelOptions{Provider: "hetzner"}
			tt.change(&req, &o)
			_, err := cloud.NewLabels(req, o)
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("NewLabels error = %v, want one containing %q", err, tt.wantErr)
			}
		})
	}
}

func TestSanitizeValue(t *testing.T) {
	tests := []struct{ in, want string }{
		{"", ""},
		{"tidal-lobster", "tidal-lobster"},
		{"Alice.Doe_1", "Alice.Doe_1"},
		{"alice@example.com", "alice_example.com"},
		{"-leading and trailing-", "leading_and_trailing"},
		{"__", ""},
		{"héllo wörld", "h_llo_w_rld"},
		{strings.Repeat("a", 70), strings.Repeat("a", 63)},
		{strings.Repeat("a", 62) + "-b", strings.Repeat("a", 62)},
	}
	for _, tt := range tests {
		if got := cloud.SanitizeValue(tt.in); got != tt.want {
			t.Errorf("SanitizeValue(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestGCPLabels(t *testing.T) {
	got := cloud.GCPLabels(map[string]string{
		"crabbox": "true", "owner": "Alice.Doe", "Branch": "Main", "9lives": "x", "host_key": "ABC234",
	})
	want := map[string]string{"crabbox": "true", "owner": "alice_doe", "branch": "main", "x9lives": "x", "host_key": "abc234"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("GCPLabels (-want +got):\n%s", diff)
	}
}

func TestParseLabelsRoundTrip(t *testing.T) {
	hk := newHostKey(t)
	req := acquireRequest()
	req.Keep = true
	labels, err := cloud.NewLabels(req, cloud.LabelOptions{Provider: "gcp", ServerType: "e2-small", HostKey: hk.PublicKey()})
	if err != nil {
		t.Fatal(err)
	}
	labels = cloud.WithSSHPort(labels, 22)
	for name, ls := range map[string]map[string]string{"plain": labels, "gcp": cloud.GCPLabels(labels)} {
		t.Run(name, func(t *testing.T) {
			info, err := cloud.ParseLabels(ls)
			if err != nil {
				t.Fatal(err)
			}
			want := cloud.Info{
				LeaseID: req.LeaseID, Slug: req.Slug, Provider: "gcp", ServerType: "e2-small", OS: "linux",
				State: cloud.StateProvisioning, Keep: true, CreatedAt: created, LastTouchedAt: created, ExpiresAt: expires,
				TTL: req.TTL, IdleTimeout: req.IdleTimeout, HostKey: hk.AuthorizedKey(), SSHPort: 22, Labels: ls,
			}
			if diff := cmp.Diff(want, info); diff != "" {
				t.Errorf("ParseLabels (-want +got):\n%s", diff)
			}
			var target provider.LeaseTarget
			info.Apply(&target)
			wantTarget := provider.LeaseTarget{
				LeaseID: req.LeaseID, Slug: req.Slug, Provider: "gcp", State: cloud.StateProvisioning,
				HostKey: hk.AuthorizedKey(), Port: 22, Labels: ls, CreatedAt: created, ExpiresAt: expires,
			}
			if diff := cmp.Diff(wantTarget, target); diff != "" {
				t.Errorf("Apply (-want +got):\n%s", diff)
			}
		})
	}
}

func TestParseLabelsRejects(t *testing.T) {
	base := func() map[string]string {
		l, err := cloud.NewLabels(acquireRequest(), cloud.LabelOptions{Provider: "aws"})
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	tests := []struct {
		name    string
		change  func(map[string]string)
		wantErr string
	}{
		{"not crabbox", func(l map[string]string) { delete(l, "crabbox") }, "not a crabbox box"},
		{"bad lease", func(l map[string]string) { l["lease"] = "web-1" }, `lease="web-1" is not a crabbox lease ID`},
		{"no provider", func(l map[string]string) { delete(l, "provider") }, "no provider label"},
		{"bad keep", func(l map[string]string) { l["keep"] = "maybe" }, `keep="maybe" is not a boolean`},
		{"bad expiry", func(l map[string]string) { l["expires_at"] = "soon" }, `expires_at="soon" is not a number`},
		{"negative ttl", func(l map[string]string) { l["ttl_secs"] = "-5" }, `ttl_secs="-5"`},
		{"bad host key", func(l map[string]string) { l["host_key"] = "ABC" }, `host_key="ABC" is not an encoded ed25519 key`},
		{"bad port", func(l map[string]string) { l["ssh_port"] = "70000" }, `ssh_port="70000" is not a TCP port`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := base()
			tt.change(l)
			_, err := cloud.ParseLabels(l)
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("ParseLabels error = %v, want one containing %q", err, tt.wantErr)
			}
		})
	}
}

func TestTouchAndState(t *testing.T) {
	labels, err := cloud.NewLabels(acquireRequest(), cloud.LabelOptions{Provider: "aws"})
	if err != nil {
		t.Fatal(err)
	}
	now, later := created.Add(10*time.Minute), expires.Add(10*time.Minute)
	touched := cloud.Touch(labels, now, later)
	info, err := cloud.ParseLabels(cloud.WithState(touched, cloud.StateRunning))
	if err != nil {
		t.Fatal(err)
	}
	if !info.LastTouchedAt.Equal(now) || !info.ExpiresAt.Equal(later) || info.State != cloud.StateRunning {
		t.Errorf("after Touch and WithState: touched %v expires %v state %q; want %v, %v, running", info.LastTouchedAt, info.ExpiresAt, info.State, now, later)
	}
	if labels["expires_at"] != "1796023800" || labels["state"] != "provisioning" {
		t.Errorf("Touch or WithState modified its input: %v", labels)
	}
	if got := cloud.Ownership("aws", ""); !cmp.Equal(got, map[string]string{"crabbox": "true", "provider": "aws"}) {
		t.Errorf("Ownership = %v", got)
	}
	if got := cloud.Ownership("aws", "cbx_0123456789ab"); got["lease"] != "cbx_0123456789ab" || len(got) != 3 {
		t.Errorf("Ownership with lease = %v", got)
	}
}

func FuzzParseLabels(f *testing.F) {
	f.Add("true", "cbx_0123456789ab", "hetzner", "1796023800", "false", "ABC", "22")
	f.Add("true", "cbx_0123456789ab", "aws", "x", "true", "", "0")
	f.Fuzz(func(t *testing.T, crabbox, leaseID, prov, exp, keep, hostKey, port string) {
		l := map[string]string{"crabbox": crabbox, "lease": leaseID, "provider": prov, "expires_at": exp, "keep": keep, "host_key": hostKey, "ssh_port": port}
		info, err := cloud.ParseLabels(l)
		if err != nil {
			return
		}
		if info.LeaseID != leaseID || info.Provider != prov {
			t.Errorf("ParseLabels lost the identity: %+v", info)
		}
		d := cloud.DecideCleanup(cloud.CleanupInput{Labels: l, Provider: prov, Record: cloud.Record{Found: true}, Now: created})
		if d.Reason == "" {
			t.Errorf("decision without a reason: %+v", d)
		}
	})
}
