package aws_test

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/crabbox-dev/crabbox/provider"
	"github.com/crabbox-dev/crabbox/providers/aws"
)

func TestSpec(t *testing.T) {
	p, err := provider.Default().Lookup("ec2")
	if err != nil {
		t.Fatal(err)
	}
	s := p.Spec()
	if s.Name != aws.Name || s.Kind != provider.KindSSHLease || s.Coordinator != provider.CoordinatorSupported {
		t.Errorf("spec = %+v", s)
	}
	want := []provider.Feature{
		provider.FeatureSSH, provider.FeaturePinnedHostKey, provider.FeatureSelfExpiry, provider.FeatureCleanup, provider.FeatureDoctor,
		provider.FeatureCheckpoint, provider.FeatureFork, provider.FeatureRestore,
	}
	if diff := cmp.Diff(want, s.Features); diff != "" {
		t.Errorf("features (-want +got):\n%s", diff)
	}
	for _, o := range s.Options {
		if o.Help == "" || o.Flag == "" {
			t.Errorf("option %q lacks help or a flag", o.Name)
		}
		if strings.Contains(o.Name, "secret") || strings.Contains(o.Name, "key") {
			t.Errorf("option %q looks like a credential; credentials come only from the SDK's chain", o.Name)
		}
	}
	s.Features[0] = "mutated"
	if p.Spec().Features[0] != provider.FeatureSSH {
		t.Error("Spec returns shared slices")
	}
}

func TestParseConfig(t *testing.T) {
	got, err := aws.ParseConfig(provider.Config{
		"regions": " eu-west-1 , us-east-2 ", "profile": "work", "instance-type": "c7g.large", "arch": "arm64",
		"image": "ami-0123456789abcdef0", "ssh-cidr": "198.51.100.7/32", "market": "on-demand", "disk-gb": "50",
		"boot-timeout": "3m", "work-root": "/srv/crabbox", "owner": "ci", "endpoint": "http://127.0.0.1:4566",
	})
	if err != nil {
		t.Fatal(err)
	}
	want := aws.Config{
		Regions: []string{"eu-west-1", "us-east-2"}, Profile: "work", InstanceType: "c7g.large", Arch: "arm64",
		Image: "ami-0123456789abcdef0", SSHCIDR: "198.51.100.7/32", Market: "on-demand", DiskGB: 50,
		BootTimeout: 3 * time.Minute, WorkRoot: "/srv/crabbox", Owner: "ci", Endpoint: "http://127.0.0.1:4566",
	}
	if diff := cmp.Diff(want, got, cmpopts.IgnoreFields(aws.Config{}, "MapAddress", "Credentials")); diff != "" {
		t.Errorf("ParseConfig (-want +got):\n%s", diff)
	}

	defaults, err := aws.ParseConfig(nil)
	if err != nil {
		t.Fatal(err)
	}
	wantDefaults := aws.Config{
		InstanceType: aws.DefaultInstanceType, Market: aws.MarketSpot, DiskGB: aws.DefaultDiskGB,
		BootTimeout: aws.DefaultBootTimeout, WorkRoot: aws.DefaultWorkRoot,
	}
	if diff := cmp.Diff(wantDefaults, defaults, cmpopts.IgnoreFields(aws.Config{}, "MapAddress", "Credentials")); diff != "" {
		t.Errorf("defaults (-want +got):\n%s", diff)
	}
}

// TestBadConfig: every bad value is an error naming its option, from
// Configure, before anything is contacted.
func TestBadConfig(t *testing.T) {
	cases := map[string]provider.Config{
		"unknown key":   {"access-key": "x"},
		"disk-gb":       {"disk-gb": "lots"},
		"boot-timeout":  {"boot-timeout": "soon"},
		"regions":       {"regions": "us-east-1,Mars"},
		"instance-type": {"instance-type": "big"},
		"arch":          {"arch": "riscv"},
		"image":         {"image": "ubuntu"},
		"ssh-cidr":      {"ssh-cidr": "203.0.113.7"},
		"market":        {"market": "reserved"},
		"work-root":     {"work-root": "relative/dir"},
		"endpoint":      {"endpoint": "ec2.example?x=1"},
	}
	for name, cfg := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := aws.Provider{}.Configure(cfg, provider.Runtime{})
			if err == nil {
				t.Fatal("Configure succeeded")
			}
			want := name
			if name == "unknown key" {
				want = "access-key"
			}
			if !strings.Contains(err.Error(), want) {
				t.Errorf("error %q does not name %q", err, want)
			}
		})
	}
	for name, edit := range map[string]func(*aws.Config){
		"ssh-cidr host bits": func(c *aws.Config) { c.SSHCIDR = "203.0.113.7/24" },
		"ssh-cidr IPv6":      func(c *aws.Config) { c.SSHCIDR = "2001:db8::/32" },
		"disk-gb":            func(c *aws.Config) { c.DiskGB = 2 },
		"boot-timeout":       func(c *aws.Config) { c.BootTimeout = -time.Second },
		"work-root":          func(c *aws.Config) { c.WorkRoot = "/" },
		"SSH port":           func(c *aws.Config) { c.SSHPorts = []int{70000} },
	} {
		t.Run(name, func(t *testing.T) {
			var c aws.Config
			edit(&c)
			if _, err := aws.New(c, provider.Runtime{}); err == nil || !strings.Contains(err.Error(), strings.Fields(name)[0]) {
				t.Errorf("New: %v, want an error naming %s", err, name)
			}
		})
	}
}
