package aws_test

import (
	"context"
	"errors"
	"maps"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/jonboulle/clockwork"

	"github.com/crabbox-dev/crabbox/lease"
	"github.com/crabbox-dev/crabbox/provider"
	"github.com/crabbox-dev/crabbox/providers/aws"
	"github.com/crabbox-dev/crabbox/providers/aws/internal/fakeec2"
	"github.com/crabbox-dev/crabbox/providers/internal/cloud"
)

// runCall returns the RunInstances calls the fake received.
func runCalls(w *world) []fakeec2.Call {
	var out []fakeec2.Call
	for _, c := range w.ec2.Calls() {
		if c.Action == run {
			out = append(out, c)
		}
	}
	return out
}

func TestAcquireLaunchesAsSpecified(t *testing.T) {
	w := newWorld(t)
	b := w.backend(t)
	req := request(t)
	target, err := b.Acquire(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}

	runs := runCalls(w)
	if len(runs) != 1 {
		t.Fatalf("RunInstances calls = %d, want 1", len(runs))
	}
	p := runs[0].Params
	for key, want := range map[string]string{
		"ClientToken":                       req.LeaseID,
		"ImageId":                           fakeec2.UbuntuAMD64, // newest available Canonical image
		"InstanceType":                      aws.DefaultInstanceType,
		"InstanceInitiatedShutdownBehavior": "terminate",
		"InstanceMarketOptions.MarketType":  "spot",
		"KeyName":                           "crabbox-" + req.LeaseID,
		"MetadataOptions.HttpTokens":        "required",
	} {
		if got := p.Get(key); got != want {
			t.Errorf("RunInstances %s = %q, want %q", key, got, want)
		}
	}

	insts := w.ec2.Instances(region)
	if len(insts) != 1 {
		t.Fatalf("instances = %+v, want one", insts)
	}
	inst := insts[0]
	if inst.ID != target.CloudID || inst.Lifecycle != "spot" || inst.Shutdown != "terminate" {
		t.Errorf("instance = %+v, want %s, spot, shutdown behaviour terminate", inst, target.CloudID)
	}
	wantLabels := map[string]string{
		"crabbox": "true", "created_by": "crabbox", "provider": "aws", "lease": req.LeaseID, "slug": req.Slug,
		"owner": "tester", "server_type": aws.DefaultInstanceType, "target": "linux", "keep": "false",
		"state": "provisioning", "created_at": unix(req.CreatedAt), "last_touched_at": unix(req.CreatedAt),
		"expires_at": unix(req.ExpiresAt), "idle_timeout_secs": "1800", "ttl_secs": "5400", "suite": "aws",
	}
	hostKey, err := lease.ParsePublicKey(target.HostKey)
	if err != nil {
		t.Fatalf("target host key: %v", err)
	}
	if wantLabels["host_key"], err = cloud.HostKeyLabel(hostKey); err != nil {
		t.Fatal(err)
	}
	readyLabels := maps.Clone(wantLabels)
	readyLabels["state"], readyLabels["ssh_port"] = "ready", "2222"
	if diff := cmp.Diff(readyLabels, target.Labels); diff != "" {
		t.Errorf("target labels (-want +got):\n%s", diff)
	}
	for k, v := range readyLabels {
		if inst.Tags[k] != v {
			t.Errorf("instance tag %s = %q, want %q", k, inst.Tags[k], v)
		}
	}
	if inst.Tags["Name"] != "crabbox-test-crab" || inst.Tags["work_root"] != target.WorkRoot {
		t.Errorf("instance's own tags = %v", inst.Tags)
	}
	vols := w.ec2.Volumes(region)
	if len(vols) != 1 || vols[0].Instance != inst.ID {
		t.Fatalf("volumes = %+v, want the instance's one", vols)
	}
	if diff := cmp.Diff(wantLabels, vols[0].Tags); diff != "" {
		t.Errorf("volume tags (-want +got):\n%s", diff)
	}

	keys := w.ec2.KeyPairs(region)
	if len(keys) != 1 || keys[0].Name != "crabbox-"+req.LeaseID || keys[0].PublicKey != req.PublicKey {
		t.Fatalf("key pairs = %+v, want the lease key", keys)
	}
	if diff := cmp.Diff(wantLabels, keys[0].Tags); diff != "" {
		t.Errorf("key pair tags (-want +got):\n%s", diff)
	}

	groups := w.ec2.SecurityGroups(region)
	if len(groups) != 1 {
		t.Fatalf("security groups = %+v, want one", groups)
	}
	g := groups[0]
	if g.Name != aws.SecurityGroupName(sshCIDR, aws.DefaultSSHPorts) || g.VPC != fakeec2.DefaultVPC ||
		g.Tags["crabbox"] != "true" || g.Tags["created_by"] != "crabbox" || g.Tags["lease"] != "" {
		t.Errorf("security group = %+v", g)
	}
	wantRules := []fakeec2.Rule{{Protocol: "tcp", From: 2222, To: 2222, CIDR: sshCIDR}, {Protocol: "tcp", From: 22, To: 22, CIDR: sshCIDR}}
	if diff := cmp.Diff(wantRules, g.Ingress); diff != "" {
		t.Errorf("ingress rules (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{g.ID}, inst.Groups); diff != "" {
		t.Errorf("instance groups (-want +got):\n%s", diff)
	}

	bs, err := cloud.ParseUserData(inst.UserData)
	if err != nil {
		t.Fatal(err)
	}
	if bs.AuthorizedKey != req.PublicKey || bs.SelfDestructAfter != req.TTL || bs.HostKey.AuthorizedKey() != target.HostKey {
		t.Errorf("user data: key %q, self-destruct %s, host key %q; want %q, %s, %q",
			bs.AuthorizedKey, bs.SelfDestructAfter, bs.HostKey.AuthorizedKey(), req.PublicKey, req.TTL, target.HostKey)
	}
	if target.User != "crabbox" || target.Provider != "aws" || target.LeaseID != req.LeaseID || !target.ExpiresAt.Equal(req.ExpiresAt) {
		t.Errorf("target = %+v", target)
	}

	// A second lease reuses crabbox's group and opens nothing new.
	if _, err := b.Acquire(context.Background(), request(t)); err != nil {
		t.Fatal(err)
	}
	if got := w.ec2.SecurityGroups(region); len(got) != 1 || len(got[0].Ingress) != 2 {
		t.Errorf("security groups after a second lease = %+v, want the same one", got)
	}
}

func unix(t time.Time) string { return strconv.FormatInt(t.Unix(), 10) }

func TestAcquireImage(t *testing.T) {
	cases := []struct {
		name      string
		edit      func(*aws.Config)
		wantImage string
	}{
		{"amd64 by default", func(*aws.Config) {}, fakeec2.UbuntuAMD64},
		{"arm64 for Graviton types", func(c *aws.Config) { c.InstanceType = "t4g.small" }, fakeec2.UbuntuARM64},
		{"arm64 when asked", func(c *aws.Config) { c.Arch = aws.ArchARM64; c.InstanceType = "m7g.large" }, fakeec2.UbuntuARM64},
		{"the configured image", func(c *aws.Config) { c.Image = fakeec2.UbuntuAMD64Old }, fakeec2.UbuntuAMD64Old},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorld(t)
			if _, err := w.backend(t, tc.edit).Acquire(context.Background(), request(t)); err != nil {
				t.Fatal(err)
			}
			if got := runCalls(w)[0].Params.Get("ImageId"); got != tc.wantImage {
				t.Errorf("ImageId = %q, want %q", got, tc.wantImage)
			}
		})
	}
	t.Run("unknown image", func(t *testing.T) {
		w := newWorld(t)
		_, err := w.backend(t, func(c *aws.Config) { c.Image = "ami-00000000deadbeef" }).Acquire(context.Background(), request(t))
		if !errors.Is(err, provider.ErrNotFound) {
			t.Errorf("Acquire with an unknown image: %v, want one matching provider.ErrNotFound", err)
		}
		if got := w.actions(); len(got) != 0 {
			t.Errorf("calls changing state: %v, want none", got)
		}
	})
}

// TestSpotFallsBackOnCapacity: spot capacity errors fall back to an
// on-demand instance; other errors do not.
func TestSpotFallsBackOnCapacity(t *testing.T) {
	spot := func(c fakeec2.Call) bool { return c.Params.Get("InstanceMarketOptions.MarketType") == "spot" }
	for _, code := range []string{"InsufficientInstanceCapacity", "SpotMaxPriceTooLow", "MaxSpotInstanceCountExceeded"} {
		t.Run(code, func(t *testing.T) {
			w := newWorld(t)
			w.ec2.Inject(fakeec2.Fault{Action: run, Match: spot, Code: code})
			req := request(t)
			target, err := w.backend(t).Acquire(context.Background(), req)
			if err != nil {
				t.Fatal(err)
			}
			runs := runCalls(w)
			if len(runs) != 2 || runs[1].Params.Get("InstanceMarketOptions.MarketType") != "" ||
				runs[1].Params.Get("ClientToken") != req.LeaseID+"-on-demand" {
				t.Fatalf("RunInstances calls = %v, want spot then on-demand with its own token", runs)
			}
			inst, _ := w.ec2.Instance(region, target.CloudID)
			if inst.Lifecycle != "" {
				t.Errorf("instance lifecycle = %q, want on-demand", inst.Lifecycle)
			}
		})
	}
	t.Run("other errors do not fall back", func(t *testing.T) {
		w := newWorld(t)
		w.ec2.Inject(fakeec2.Fault{Action: run, Match: spot, Code: "InvalidParameterCombination"})
		if _, err := w.backend(t).Acquire(context.Background(), request(t)); err == nil {
			t.Fatal("Acquire succeeded")
		}
		if got := len(runCalls(w)); got != 1 {
			t.Errorf("RunInstances calls = %d, want 1", got)
		}
		w.checkNothingLeft(t)
	})
	t.Run("on-demand market", func(t *testing.T) {
		w := newWorld(t)
		req := request(t)
		if _, err := w.backend(t, func(c *aws.Config) { c.Market = aws.MarketOnDemand }).Acquire(context.Background(), req); err != nil {
			t.Fatal(err)
		}
		runs := runCalls(w)
		if len(runs) != 1 || runs[0].Params.Get("InstanceMarketOptions.MarketType") != "" || runs[0].Params.Get("ClientToken") != req.LeaseID {
			t.Errorf("RunInstances calls = %v, want one on-demand with the lease ID as token", runs)
		}
	})
}

// TestLostRunAnswerIsIdempotent: when RunInstances' answer is lost and the
// SDK retries, the client token (the lease ID) yields the same instance.
func TestLostRunAnswerIsIdempotent(t *testing.T) {
	w := newWorld(t)
	w.ec2.Inject(fakeec2.Fault{Action: run, After: true, Status: http.StatusServiceUnavailable, Code: "Unavailable", Times: 1})
	target, err := w.backend(t).Acquire(context.Background(), request(t))
	if err != nil {
		t.Fatal(err)
	}
	if got := len(runCalls(w)); got != 2 {
		t.Errorf("RunInstances calls = %d, want 2 (the lost one and the retry)", got)
	}
	insts := w.ec2.Instances(region)
	if len(insts) != 1 || insts[0].ID != target.CloudID {
		t.Errorf("instances = %+v, want only %s", insts, target.CloudID)
	}
}

func TestAcquireRefusesForeignSecurityGroup(t *testing.T) {
	w := newWorld(t)
	foreign := w.ec2.AddSecurityGroup(region, fakeec2.SecurityGroup{
		Name: aws.SecurityGroupName(sshCIDR, aws.DefaultSSHPorts), Description: "someone else's",
		Tags: map[string]string{"team": "web"},
	})
	_, err := w.backend(t).Acquire(context.Background(), request(t))
	if !errors.Is(err, provider.ErrConflict) {
		t.Fatalf("Acquire: %v, want one matching provider.ErrConflict", err)
	}
	if diff := cmp.Diff([]string{importKey, deleteKey}, w.actions()); diff != "" {
		t.Errorf("calls (-want +got):\n%s", diff)
	}
	if got := w.ec2.SecurityGroups(region); len(got) != 1 || got[0].ID != foreign.ID || len(got[0].Ingress) != 0 {
		t.Errorf("security groups = %+v, want the foreign one untouched", got)
	}
	if got := w.ec2.KeyPairs(region); len(got) != 0 {
		t.Errorf("key pairs left: %+v", got)
	}
}

// TestAcquireWaitsForAddress: a pending instance is polled on the clock
// until it runs with an address.
func TestAcquireWaitsForAddress(t *testing.T) {
	w := newWorld(t)
	w.ec2.SetPendingDescribes(3)
	clock := clockwork.NewFakeClock()
	b := w.backendWithClock(t, clock)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, err := b.Acquire(ctx, request(t))
		done <- err
	}()
	polls := 0
	for {
		waiting := make(chan error, 1)
		wctx, stop := context.WithCancel(ctx)
		go func() { waiting <- clock.BlockUntilContext(wctx, 1) }()
		select {
		case err := <-done:
			stop()
			<-waiting
			if err != nil {
				t.Fatal(err)
			}
			if polls != 3 {
				t.Errorf("waited %d poll intervals, want 3", polls)
			}
			return
		case err := <-waiting:
			stop()
			if err != nil {
				t.Fatal(err)
			}
			clock.Advance(2 * time.Second)
			polls++
		}
	}
}

// TestAcquireFallsBackToPort22: a box whose port 2222 is blocked is
// reached on 22, and the lease records that port.
func TestAcquireFallsBackToPort22(t *testing.T) {
	w := newWorld(t)
	w.ec2.SetHooks(fakeec2.Hooks{
		Launch: func(in fakeec2.Instance) (string, error) {
			ip := w.fleet.NewAddress()
			w.fleet.Block(ip, 2222)
			return ip, w.fleet.Boot(ip, in.UserData)
		},
		Terminate: func(in fakeec2.Instance) { _ = w.fleet.Halt(in.Address) },
	})
	b := w.backend(t)
	target, err := b.Acquire(context.Background(), request(t))
	if err != nil {
		t.Fatal(err)
	}
	inst, _ := w.ec2.Instance(region, target.CloudID)
	if inst.Tags["ssh_port"] != "22" {
		t.Errorf("ssh_port tag = %q, want 22", inst.Tags["ssh_port"])
	}
	if _, port := w.fleet.MapAddress(inst.PublicIP, 22); target.Port != port {
		t.Errorf("target port = %d, want the box's port 22 (%d)", target.Port, port)
	}
	again, err := b.Resolve(context.Background(), provider.ResolveRequest{ID: target.LeaseID})
	if err != nil || again.Port != target.Port {
		t.Errorf("Resolve = %+v, %v; want port %d", again, err, target.Port)
	}
}

// TestAcquireRejectsBadRequestsBeforeCreatingAnything: configuration and
// request errors change nothing in the cloud.
func TestAcquireRejectsBadRequestsBeforeCreatingAnything(t *testing.T) {
	cases := []struct {
		name string
		edit func(*aws.Config)
		req  func(*provider.AcquireRequest)
		want error
	}{
		{"no ssh-cidr", func(c *aws.Config) { c.SSHCIDR = "" }, nil, provider.ErrPrecondition},
		{"reserved label", nil, func(r *provider.AcquireRequest) { r.Labels["lease"] = "x" }, nil},
		{"provider tag as label", nil, func(r *provider.AcquireRequest) { r.Labels["host_key"] = "x" }, nil},
		{"bad label key", nil, func(r *provider.AcquireRequest) { r.Labels["bad key!"] = "x" }, nil},
		{"bad public key", nil, func(r *provider.AcquireRequest) { r.PublicKey = "not a key" }, nil},
		{"TTL too short for the self-destruct timer", nil, func(r *provider.AcquireRequest) { r.TTL = time.Second }, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorld(t)
			var edits []func(*aws.Config)
			if tc.edit != nil {
				edits = append(edits, tc.edit)
			}
			req := request(t)
			if tc.req != nil {
				tc.req(&req)
			}
			_, err := w.backend(t, edits...).Acquire(context.Background(), req)
			if err == nil {
				t.Fatal("Acquire succeeded")
			}
			if tc.want != nil && !errors.Is(err, tc.want) {
				t.Errorf("Acquire: %v, want one matching %v", err, tc.want)
			}
			if calls := w.ec2.Calls(); len(calls) != 0 {
				t.Errorf("calls = %v, want none", calls)
			}
		})
	}
}
