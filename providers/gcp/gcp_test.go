package gcp_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"cloud.google.com/go/compute/apiv1/computepb"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/proto"

	"github.com/crabbox-dev/crabbox/provider"
	"github.com/crabbox-dev/crabbox/providers/gcp"
	"github.com/crabbox-dev/crabbox/providers/internal/cloud"
)

func TestAcquire(t *testing.T) {
	e := newEnv(t)
	b := e.backend(t)
	req, _ := newRequest(t, time.Now())
	target, err := b.Acquire(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	all := e.api.instanceList()
	if len(all) != 1 {
		t.Fatalf("project has %d instances, want 1", len(all))
	}
	in := all[0]
	name := "crabbox-" + strings.ReplaceAll(req.LeaseID, "_", "-")
	if in.GetName() != name {
		t.Errorf("instance name %q, want %q", in.GetName(), name)
	}
	if want := "zones/" + zones[0] + "/machineTypes/e2-small"; in.GetMachineType() != want {
		t.Errorf("machine type %q, want %q", in.GetMachineType(), want)
	}
	s := in.GetScheduling()
	if s.GetProvisioningModel() != "SPOT" || s.GetInstanceTerminationAction() != "DELETE" || s.GetMaxRunDuration().GetSeconds() != int64(req.TTL/time.Second) {
		t.Errorf("scheduling %v: want SPOT, deleted by Compute Engine after the TTL %s", s, req.TTL)
	}
	if tags := in.GetTags().GetItems(); len(tags) != 1 || tags[0] != gcp.NetworkTag {
		t.Errorf("network tags %v, want [%s]", tags, gcp.NetworkTag)
	}
	disk := in.GetDisks()[0].GetInitializeParams()
	if disk.GetSourceImage() != gcp.DefaultImage || disk.GetDiskSizeGb() != gcp.DefaultDiskGB {
		t.Errorf("boot disk %v: want %s, %d GB", disk, gcp.DefaultImage, gcp.DefaultDiskGB)
	}
	if got := metadata(in, "crabbox-work-root"); got != e.cfg.WorkRoot {
		t.Errorf("crabbox-work-root = %q, want %q", got, e.cfg.WorkRoot)
	}
	if got := metadata(in, "enable-oslogin"); got != "FALSE" {
		t.Errorf("enable-oslogin = %q, want FALSE", got)
	}
	if got, want := metadata(in, "ssh-keys"), "crabbox:"+req.PublicKey; got != want {
		t.Errorf("ssh-keys = %q, want %q", got, want)
	}
	if !strings.Contains(metadata(in, "startup-script"), "command -v cloud-init") {
		t.Errorf("startup-script does not defer to cloud-init: %q", metadata(in, "startup-script"))
	}
	bs, err := cloud.ParseUserData(metadata(in, "user-data"))
	if err != nil {
		t.Fatal(err)
	}
	if bs.AuthorizedKey != req.PublicKey || bs.HostKey.AuthorizedKey() != target.HostKey || bs.SelfDestructAfter != req.TTL || bs.WorkRoot != e.cfg.WorkRoot {
		t.Errorf("user data: key %q host key %q self-destruct %s work root %q; want the lease key, the target's host key %q, %s and %q",
			bs.AuthorizedKey, bs.HostKey.AuthorizedKey(), bs.SelfDestructAfter, bs.WorkRoot, target.HostKey, req.TTL, e.cfg.WorkRoot)
	}
	box := e.api.fleet.Box(natIP(in))
	if box == nil {
		t.Fatal("no box serves the instance's address")
	}
	want := provider.LeaseTarget{
		LeaseID: req.LeaseID, Slug: req.Slug, Provider: gcp.Name, CloudID: zones[0] + "/" + name,
		Host: box.Host, Port: box.Port, User: "crabbox", HostKey: bs.HostKey.AuthorizedKey(), WorkRoot: e.cfg.WorkRoot,
		State: "ready", Labels: in.GetLabels(), CreatedAt: req.CreatedAt, ExpiresAt: req.ExpiresAt,
	}
	if diff := cmp.Diff(want, target); diff != "" {
		t.Errorf("target (-want +got):\n%s", diff)
	}
	for k, v := range map[string]string{
		"crabbox": "true", "created_by": "crabbox", "provider": "gcp", "lease": req.LeaseID, "slug": req.Slug,
		"owner": "tester", "server_type": "e2-small", "state": "ready", "ssh_port": "2222", "keep": "false", "suite": "gcp",
		"expires_at": strconv.FormatInt(req.ExpiresAt.Unix(), 10), "ttl_secs": "5400", "idle_timeout_secs": "1800",
	} {
		if in.GetLabels()[k] != v {
			t.Errorf("instance label %s=%q, want %q", k, in.GetLabels()[k], v)
		}
	}
	fws := e.api.firewallList()
	if len(fws) != 1 {
		t.Fatalf("firewall rules %v, want 1", fws)
	}
	fw := fws[0]
	if fw.GetName() != gcp.FirewallName(gcp.DefaultNetwork, sourceRange, []int{2222, 22}) || !strings.HasPrefix(fw.GetDescription(), "crabbox:") ||
		!cmp.Equal(fw.GetSourceRanges(), []string{sourceRange}) || !cmp.Equal(fw.GetTargetTags(), []string{gcp.NetworkTag}) ||
		len(fw.GetAllowed()) != 1 || !cmp.Equal(fw.GetAllowed()[0].GetPorts(), []string{"2222", "22"}) {
		t.Errorf("firewall rule %v: want crabbox's, letting %s reach 2222 and 22 of tag %s", fw, sourceRange, gcp.NetworkTag)
	}
	if diff := cmp.Diff([]string{"insert firewall", "insert instance", "label instance state=ready"}, events(e.api)); diff != "" {
		t.Errorf("API mutations (-want +got):\n%s", diff)
	}
	if err := b.ReleaseLease(context.Background(), provider.ReleaseRequest{Lease: target}); err != nil {
		t.Fatal(err)
	}
	if in := e.api.instanceList(); len(in) != 0 {
		t.Errorf("instances after release: %v", in)
	}
	if r := e.api.fleet.Running(); len(r) != 0 {
		t.Errorf("boxes after release: %v", r)
	}
	if strings.Contains(e.logs.String(), "PRIVATE KEY") {
		t.Error("a private key reached the logs")
	}
}

// TestAcquireFallbackPort: a box whose 2222 is firewalled is reached on 22,
// and Resolve remembers that from the ssh_port label.
func TestAcquireFallbackPort(t *testing.T) {
	e := newEnv(t)
	b := e.backend(t, func(c *gcp.Config) {
		c.MapAddress = func(host string, port int) (string, int) {
			if port == 2222 {
				port = 1 // nothing listens there
			}
			return e.api.fleet.MapAddress(host, port)
		}
	})
	req, _ := newRequest(t, time.Now())
	target, err := b.Acquire(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	defer b.ReleaseLease(context.Background(), provider.ReleaseRequest{Lease: target})
	if target.Labels["ssh_port"] != "22" {
		t.Errorf("ssh_port label = %q, want 22", target.Labels["ssh_port"])
	}
	got, err := b.Resolve(context.Background(), provider.ResolveRequest{ID: req.LeaseID})
	if err != nil {
		t.Fatal(err)
	}
	if got.Host != target.Host || got.Port != target.Port {
		t.Errorf("Resolve reaches %s:%d, Acquire %s:%d", got.Host, got.Port, target.Host, target.Port)
	}
}

// TestCapacityFallback: spot in every zone first, then standard, each
// once, moving on only on capacity errors.
func TestCapacityFallback(t *testing.T) {
	b0, b1 := zones[0], zones[1]
	tests := []struct {
		name         string
		market       string
		capacity     map[string]string
		fault        *fault
		wantAttempts []string
		wantModel    string
		wantErr      error
	}{
		{"first fits", "", nil, nil, []string{b0 + "/SPOT"}, "SPOT", nil},
		{"next zone", "", map[string]string{b0 + "/SPOT": "ZONE_RESOURCE_POOL_EXHAUSTED"},
			nil, []string{b0 + "/SPOT", b1 + "/SPOT"}, "SPOT", nil},
		{"standard when no spot", "", map[string]string{b0 + "/SPOT": "ZONE_RESOURCE_POOL_EXHAUSTED", b1 + "/SPOT": "ZONE_RESOURCE_POOL_EXHAUSTED_WITH_DETAILS"},
			nil, []string{b0 + "/SPOT", b1 + "/SPOT", b0 + "/STANDARD"}, "STANDARD", nil},
		{"standard only", gcp.MarketStandard, nil, nil, []string{b0 + "/STANDARD"}, "STANDARD", nil},
		{"quota error from the API", "", nil, &fault{status: 403, reason: "quotaExceeded", times: 1},
			[]string{b1 + "/SPOT"}, "SPOT", nil},
		{"fail fast on other errors", "", map[string]string{b0 + "/SPOT": "ZONE_RESOURCE_POOL_EXHAUSTED", b1 + "/SPOT": "INVALID_FIELD_VALUE"},
			nil, []string{b0 + "/SPOT", b1 + "/SPOT"}, "", provider.ErrTransient},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t)
			if tt.capacity != nil {
				e.api.capacity = tt.capacity
			}
			if tt.fault != nil {
				e.api.setFault(opInstanceInsert, *tt.fault)
			}
			b := e.backend(t, func(c *gcp.Config) { c.Market = tt.market })
			req, _ := newRequest(t, time.Now())
			target, err := b.Acquire(context.Background(), req)
			if diff := cmp.Diff(tt.wantAttempts, e.api.insertAttempts()); diff != "" {
				t.Errorf("insert attempts (-want +got):\n%s", diff)
			}
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) || errors.Is(err, provider.ErrCapacity) {
					t.Fatalf("Acquire err = %v, want one matching %v and not ErrCapacity", err, tt.wantErr)
				}
				checkEmpty(t, e.api)
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			in := e.api.instanceList()[0]
			if got := in.GetScheduling().GetProvisioningModel(); got != tt.wantModel {
				t.Errorf("provisioning model %q, want %q", got, tt.wantModel)
			}
			if in.GetScheduling().GetInstanceTerminationAction() != "DELETE" || in.GetScheduling().GetMaxRunDuration().GetSeconds() != int64(req.TTL/time.Second) {
				t.Errorf("scheduling %v: want deletion at the TTL", in.GetScheduling())
			}
			if err := b.ReleaseLease(context.Background(), provider.ReleaseRequest{Lease: target}); err != nil {
				t.Fatal(err)
			}
			if in := e.api.instanceList(); len(in) != 0 {
				t.Errorf("instances after release: %v", in)
			}
		})
	}
}

// TestFirewallNotOurs: a rule of crabbox's name that crabbox did not
// create is never used or changed, and nothing is created.
func TestFirewallNotOurs(t *testing.T) {
	e := newEnv(t)
	name := gcp.FirewallName(gcp.DefaultNetwork, sourceRange, []int{2222, 22})
	theirs := &computepb.Firewall{
		Name: proto.String(name), Description: proto.String("the network team's rule"), Network: proto.String(gcp.DefaultNetwork),
		Direction: proto.String("INGRESS"), SourceRanges: []string{"0.0.0.0/0"}, TargetTags: []string{gcp.NetworkTag},
		Allowed: []*computepb.Allowed{{IPProtocol: proto.String("tcp"), Ports: []string{"2222", "22"}}},
	}
	e.api.addFirewall(proto.CloneOf(theirs))
	b := e.backend(t)
	req, _ := newRequest(t, time.Now())
	_, err := b.Acquire(context.Background(), req)
	if !errors.Is(err, provider.ErrConflict) || !strings.Contains(err.Error(), "not created by crabbox") {
		t.Fatalf("Acquire err = %v, want a conflict naming the foreign rule", err)
	}
	if step, _ := cloud.FailedStep(err); step != "firewall" {
		t.Errorf("failed step %q, want firewall", step)
	}
	if fw := e.api.firewallList(); len(fw) != 1 || !proto.Equal(fw[0], theirs) {
		t.Errorf("firewall rules %v, want only the untouched foreign one", fw)
	}
	if ev := events(e.api); len(ev) != 0 {
		t.Errorf("API mutations %v, want none", ev)
	}
}

// TestTouch: Touch rewrites the expiry labels with the label fingerprint,
// reading again when a concurrent change made the fingerprint stale.
func TestTouch(t *testing.T) {
	e := newEnv(t)
	b := e.backend(t)
	req, _ := newRequest(t, time.Now())
	target, err := b.Acquire(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	defer b.ReleaseLease(context.Background(), provider.ReleaseRequest{Lease: target})
	e.api.setFault(opSetLabels, fault{status: 412, reason: "conditionNotMet", times: 1})
	later := req.ExpiresAt.Add(time.Hour)
	got, err := b.Touch(context.Background(), provider.TouchRequest{Lease: target, Now: req.CreatedAt.Add(time.Minute), ExpiresAt: later})
	if err != nil {
		t.Fatal(err)
	}
	if !got.ExpiresAt.Equal(later) || got.Labels["last_touched_at"] != strconv.FormatInt(req.CreatedAt.Add(time.Minute).Unix(), 10) {
		t.Errorf("touched target expires %v, last touched %q; want %v", got.ExpiresAt, got.Labels["last_touched_at"], later)
	}
	in := e.api.instanceList()[0]
	if in.GetLabels()["expires_at"] != strconv.FormatInt(later.Unix(), 10) || in.GetLabels()["state"] != "ready" {
		t.Errorf("instance labels after touch: %v", in.GetLabels())
	}

	e.api.setFault(opSetLabels, fault{status: 412, reason: "conditionNotMet"})
	if _, err := b.Touch(context.Background(), provider.TouchRequest{Lease: target, Now: req.CreatedAt, ExpiresAt: later}); !errors.Is(err, provider.ErrConflict) {
		t.Errorf("Touch with labels that keep changing: %v, want ErrConflict", err)
	}
}

// TestReleaseFails: an instance release cannot delete is labelled
// released, so cleanup deletes it at once; the release reports the
// failure.
func TestReleaseFails(t *testing.T) {
	e := newEnv(t)
	b := e.backend(t)
	req, _ := newRequest(t, time.Now())
	target, err := b.Acquire(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	e.api.setFault(opInstanceDelete, fault{status: 409, reason: "resourceInUseByAnotherResource", times: 1})
	if err := b.ReleaseLease(context.Background(), provider.ReleaseRequest{Lease: target}); !errors.Is(err, provider.ErrConflict) {
		t.Fatalf("ReleaseLease with a busy instance: %v, want ErrConflict", err)
	}
	if left := e.api.instanceList(); len(left) != 1 || left[0].GetLabels()["state"] != "released" {
		t.Fatalf("instances after the failed release: %v; want 1 labelled released", left)
	}
	if _, err := b.Resolve(context.Background(), provider.ResolveRequest{ID: req.LeaseID}); !errors.Is(err, provider.ErrNotFound) {
		t.Errorf("Resolve of a released lease: %v, want ErrNotFound", err)
	}
	ds, err := b.Cleanup(context.Background(), provider.CleanupRequest{Now: req.CreatedAt, Claimed: func(string) bool { return true }})
	if err != nil || len(ds) != 1 || !ds[0].Deleted {
		t.Fatalf("Cleanup = %+v, %v; want the released instance deleted", ds, err)
	}
	if in := e.api.instanceList(); len(in) != 0 {
		t.Errorf("instances left: %v", in)
	}
}

// TestNoSourceRange: without source-range nothing is created, and the
// error names the option.
func TestNoSourceRange(t *testing.T) {
	e := newEnv(t)
	b := e.backend(t, func(c *gcp.Config) { c.SourceRange = "" })
	req, _ := newRequest(t, time.Now())
	_, err := b.Acquire(context.Background(), req)
	if !errors.Is(err, provider.ErrPrecondition) || !strings.Contains(err.Error(), "source-range") {
		t.Fatalf("Acquire err = %v, want a precondition error naming source-range", err)
	}
	if ev := events(e.api); len(ev) != 0 {
		t.Errorf("API mutations %v, want none", ev)
	}
}

// TestPendingOperations: operations that are still running when their
// call returns are polled until done, a failed one with its error.
func TestPendingOperations(t *testing.T) {
	e := newEnv(t)
	e.api.pending = true
	e.api.capacity[zones[0]+"/SPOT"] = "ZONE_RESOURCE_POOL_EXHAUSTED"
	b := e.backend(t)
	req, _ := newRequest(t, time.Now())
	target, err := b.Acquire(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.ReleaseLease(context.Background(), provider.ReleaseRequest{Lease: target}); err != nil {
		t.Fatal(err)
	}
	// firewall, failed insert, insert, labels, delete
	if got := e.api.operationReads(); got != 5 {
		t.Errorf("operations read %d times, want 5", got)
	}
	if diff := cmp.Diff([]string{zones[0] + "/SPOT", zones[1] + "/SPOT"}, e.api.insertAttempts()); diff != "" {
		t.Errorf("insert attempts (-want +got):\n%s", diff)
	}
	if in := e.api.instanceList(); len(in) != 0 {
		t.Errorf("instances left: %v", in)
	}
}

// crabboxRule is the firewall rule crabbox makes for the test
// configuration.
func crabboxRule(sourceRange string) *computepb.Firewall {
	return &computepb.Firewall{
		Name:        proto.String(gcp.FirewallName(gcp.DefaultNetwork, sourceRange, []int{2222, 22})),
		Description: proto.String("crabbox:created_by=crabbox (made by another client)"), Network: proto.String(gcp.DefaultNetwork),
		Direction: proto.String("INGRESS"), SourceRanges: []string{sourceRange}, TargetTags: []string{gcp.NetworkTag},
		Allowed: []*computepb.Allowed{{IPProtocol: proto.String("tcp"), Ports: []string{"2222", "22"}}},
	}
}

// TestFirewallCreatedConcurrently: when another acquire creates the rule
// between this one's read and insert, this acquire uses it, and its
// rollback leaves it to the acquire that made it.
func TestFirewallCreatedConcurrently(t *testing.T) {
	e := newEnv(t)
	e.api.addFirewall(crabboxRule(sourceRange))
	e.api.setFault(opFirewallGet, fault{status: 404, reason: "notFound", times: 1}) // not there yet when read
	e.api.setFault(opInstanceInsert, fault{status: 400, reason: "invalid"})
	b := e.backend(t)
	req, _ := newRequest(t, time.Now())
	_, err := b.Acquire(context.Background(), req)
	if step, _ := cloud.FailedStep(err); step != cloud.StepCreate || strings.Contains(err.Error(), "roll back") {
		t.Fatalf("Acquire err = %v, want the create failure, rolled back", err)
	}
	if fw := e.api.firewallList(); len(fw) != 1 {
		t.Errorf("firewall rules %v, want the concurrent acquire's rule kept", fw)
	}
	if ev := events(e.api); len(ev) != 0 {
		t.Errorf("API mutations %v, want none", ev)
	}
}

// TestFirewallEdited: crabbox's own rule that no longer lets the
// configured range in is refused, not changed.
func TestFirewallEdited(t *testing.T) {
	e := newEnv(t)
	edited := crabboxRule(sourceRange)
	edited.SourceRanges = []string{"0.0.0.0/0"}
	e.api.addFirewall(edited)
	b := e.backend(t)
	req, _ := newRequest(t, time.Now())
	_, err := b.Acquire(context.Background(), req)
	if !errors.Is(err, provider.ErrConflict) || !strings.Contains(err.Error(), "was it edited") {
		t.Fatalf("Acquire err = %v, want a conflict about the edited rule", err)
	}
	if fw := e.api.firewallList(); len(fw) != 1 || !proto.Equal(fw[0], edited) {
		t.Errorf("firewall rules %v, want the edited rule untouched", fw)
	}
	if ev := events(e.api); len(ev) != 0 {
		t.Errorf("API mutations %v, want none", ev)
	}
}
