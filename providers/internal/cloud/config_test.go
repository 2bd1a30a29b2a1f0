package cloud_test

import (
	"errors"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/crabbox-dev/crabbox/lease"
	"github.com/crabbox-dev/crabbox/provider"
	"github.com/crabbox-dev/crabbox/providers/internal/cloud"
)

func TestSourceRanges(t *testing.T) {
	tests := []struct {
		in       string
		ipv4, ok bool // CheckIPv4Range's and CheckSourceRange's verdicts
	}{
		{"203.0.113.7/32", true, true},
		{"0.0.0.0/0", true, true},
		{"198.51.100.0/24", true, true},
		{"2001:db8::/32", false, true},
		{"198.51.100.1/24", false, false}, // host bits set
		{"2001:db8::1/32", false, false},
		{"203.0.113.7", false, false}, // no prefix length
		{"", false, false},
		{"somewhere", false, false},
	}
	for _, tt := range tests {
		if err := cloud.CheckIPv4Range(tt.in); (err == nil) != tt.ipv4 {
			t.Errorf("CheckIPv4Range(%q) = %v, want ok %v", tt.in, err, tt.ipv4)
		} else if err != nil && !strings.Contains(err.Error(), "IPv4 network in CIDR form") {
			t.Errorf("CheckIPv4Range(%q) = %v, want it to say what is expected", tt.in, err)
		}
		if err := cloud.CheckSourceRange(tt.in); (err == nil) != tt.ok {
			t.Errorf("CheckSourceRange(%q) = %v, want ok %v", tt.in, err, tt.ok)
		} else if err != nil && !strings.Contains(err.Error(), "CIDR form") {
			t.Errorf("CheckSourceRange(%q) = %v, want it to say what is expected", tt.in, err)
		}
	}
	err := cloud.NoSourceRange("aws", "ssh-cidr", "aws-ssh-cidr")
	if !errors.Is(err, provider.ErrPrecondition) || !strings.Contains(err.Error(), "option ssh-cidr is required") || !strings.Contains(err.Error(), "--aws-ssh-cidr") {
		t.Errorf("NoSourceRange = %v, want a precondition naming the option and its flag", err)
	}
}

func TestDiskSize(t *testing.T) {
	tests := []struct {
		gb, want int
		err      string
	}{
		{0, 30, ""},
		{8, 8, ""},
		{16384, 16384, ""},
		{7, 7, "7 is outside 8 to 16384 GiB"},
		{16385, 16385, "outside"},
		{-1, -1, "outside"},
	}
	for _, tt := range tests {
		got, err := cloud.DiskSize(tt.gb, 30, 8, 16384, "GiB")
		if got != tt.want || (err == nil) != (tt.err == "") || err != nil && !strings.Contains(err.Error(), tt.err) {
			t.Errorf("DiskSize(%d) = %d, %v; want %d, error with %q", tt.gb, got, err, tt.want, tt.err)
		}
	}
	if _, err := cloud.DiskSize(0, 5, 10, 20, "GB"); err == nil {
		t.Error("DiskSize accepted a default outside the bounds")
	}
}

func TestMarkets(t *testing.T) {
	tests := []struct {
		in, want string
		order    []string
		err      bool
	}{
		{"", "spot", []string{"spot", "on-demand"}, false},
		{"spot", "spot", []string{"spot", "on-demand"}, false},
		{"on-demand", "on-demand", []string{"on-demand"}, false},
		{"standard", "standard", nil, true}, // another cloud's name
		{"Spot", "Spot", nil, true},
	}
	for _, tt := range tests {
		got, err := cloud.CheckMarket(tt.in, "on-demand")
		if got != tt.want || (err != nil) != tt.err {
			t.Errorf("CheckMarket(%q) = %q, %v; want %q, error %v", tt.in, got, err, tt.want, tt.err)
			continue
		}
		if err != nil {
			if !strings.Contains(err.Error(), "is not spot or on-demand") {
				t.Errorf("CheckMarket(%q) = %v, want it to name the choices", tt.in, err)
			}
			continue
		}
		if diff := cmp.Diff(tt.order, cloud.Markets(got, "on-demand")); diff != "" {
			t.Errorf("Markets(%q) (-want +got):\n%s", got, diff)
		}
	}
}

func TestCheckEndpoint(t *testing.T) {
	tests := []struct {
		in  string
		err string // "" for valid
	}{
		{"https://api.example.com", ""},
		{"http://127.0.0.1:8080/v1/", ""},
		{"https://proxy.example.com/hetzner", ""},
		{"api.example.com", "not an http or https URL"},
		{"ftp://api.example.com", "not an http or https URL"},
		{"https://", "not an http or https URL"},
		{"https://user:secret@api.example.com", "carries user information"},
		{"https://api.example.com/?token=x", "query or fragment"},
		{"https://api.example.com/#x", "query or fragment"},
		{"http://[::1", "not a URL"},
	}
	for _, tt := range tests {
		err := cloud.CheckEndpoint(tt.in)
		switch {
		case tt.err == "" && err != nil:
			t.Errorf("CheckEndpoint(%q) = %v, want ok", tt.in, err)
		case tt.err != "" && (err == nil || !strings.Contains(err.Error(), tt.err)):
			t.Errorf("CheckEndpoint(%q) = %v, want an error with %q", tt.in, err, tt.err)
		case err != nil && strings.Contains(err.Error(), "secret"):
			t.Errorf("CheckEndpoint(%q) = %v: the error shows the password", tt.in, err)
		}
	}
	o := cloud.EndpointOption("hetzner", "Hetzner Cloud", "")
	if o.Name != "endpoint" || o.Flag != "hetzner-endpoint" || !o.Locates || !strings.Contains(o.Help, "Hetzner Cloud's") {
		t.Errorf("EndpointOption = %+v", o)
	}
}

func TestCheckAcquire(t *testing.T) {
	key, err := lease.NewKey()
	if err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	good := provider.AcquireRequest{LeaseID: lease.NewID(), PublicKey: key.AuthorizedKey(), ExpiresAt: now.Add(time.Minute)}
	if err := cloud.CheckAcquire(good, now); err != nil {
		t.Fatalf("CheckAcquire(good) = %v", err)
	}
	tests := map[string]struct {
		edit func(*provider.AcquireRequest)
		want string
	}{
		"lease ID": {func(r *provider.AcquireRequest) { r.LeaseID = "../etc" }, "not a crabbox lease ID"},
		"key":      {func(r *provider.AcquireRequest) { r.PublicKey = "ssh-ed25519 nope" }, "lease public key"},
		"expired":  {func(r *provider.AcquireRequest) { r.ExpiresAt = now }, "is not after now"},
	}
	for name, tt := range tests {
		req := good
		tt.edit(&req)
		if err := cloud.CheckAcquire(req, now); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: CheckAcquire = %v, want an error with %q", name, err, tt.want)
		}
	}
}

func TestTagCodec(t *testing.T) {
	hk := newHostKey(t)
	labels, err := cloud.NewLabels(acquireRequest(), cloud.LabelOptions{Provider: "linode", ServerType: "g6-standard-1", Owner: "ann", HostKey: hk.PublicKey()})
	if err != nil {
		t.Fatal(err)
	}
	labels = cloud.WithSSHPort(labels, 2222)
	for _, max := range []int{50, 255} {
		c := cloud.TagCodec{MaxLen: max}
		tags, err := c.Tags(labels)
		if err != nil {
			t.Fatal(err)
		}
		for _, tag := range tags {
			if len(tag) > max || strings.ContainsFunc(tag, func(r rune) bool {
				return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '-' || r == ':')
			}) {
				t.Errorf("max %d: tag %q is too long or has a character DigitalOcean refuses", max, tag)
			}
		}
		got := c.Labels(append(tags, "production", "team:a:b", "x:0:y"))
		want := maps.Clone(labels)
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("max %d: round trip (-want +got):\n%s", max, diff)
		}
		info, err := cloud.ParseLabels(got)
		if err != nil || info.HostKey != hk.AuthorizedKey() || info.SSHPort != 2222 {
			t.Errorf("max %d: ParseLabels = %+v, %v; want the host key and port back", max, info, err)
		}
	}
	if got := (cloud.TagCodec{MaxLen: 50}).Labels([]string{"host_key:2:BBB"}); len(got) != 0 {
		t.Errorf("a split label with a missing part = %v, want it left out", got)
	}
	if _, err := (cloud.TagCodec{MaxLen: 10}).Tags(map[string]string{"a-very-long-key": "v"}); err == nil {
		t.Error("a key longer than a tag: no error")
	}
	dotted := cloud.TagCodec{MaxLen: 50}.Labels(mustTags(t, map[string]string{"owner": "ann_example.com"}))
	if dotted["owner"] != "ann_example_com" {
		t.Errorf("owner with a dot = %q, want ann_example_com", dotted["owner"])
	}
	if tag := (cloud.TagCodec{}).Tag("lease", "cbx_0123456789ab"); tag != "lease:cbx_0123456789ab" {
		t.Errorf("Tag = %q", tag)
	}
}

func mustTags(t *testing.T, labels map[string]string) []string {
	t.Helper()
	tags, err := cloud.TagCodec{MaxLen: 50}.Tags(labels)
	if err != nil {
		t.Fatal(err)
	}
	return tags
}
