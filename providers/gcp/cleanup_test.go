package gcp_test

import (
	"bytes"
	"context"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"cloud.google.com/go/compute/apiv1/computepb"
	"github.com/google/go-cmp/cmp"

	"github.com/crabbox-dev/crabbox"
	"github.com/crabbox-dev/crabbox/lease"
	"github.com/crabbox-dev/crabbox/provider"
	"github.com/crabbox-dev/crabbox/providers/gcp"
	"github.com/crabbox-dev/crabbox/providers/internal/cloud"
	"github.com/crabbox-dev/crabbox/providers/internal/cloud/cloudtest"
)

// boxLabels are a crabbox box's labels, in GCP form, for a lease of prov.
func boxLabels(t *testing.T, prov, state string, created time.Time, change func(map[string]string)) (string, map[string]string) {
	t.Helper()
	req, _ := newRequest(t, created)
	l, err := cloud.NewLabels(req, cloud.LabelOptions{Provider: prov, State: state})
	if err != nil {
		t.Fatal(err)
	}
	if change != nil {
		change(l)
	}
	return req.LeaseID, cloud.GCPLabels(l)
}

// TestCleanupOwnership: cleanup deletes only instances carrying crabbox's
// gcp labels that this client holds a claim for, honours keep (never while
// the lease lives, like any other once it expired) and dry runs, searches every zone, and re-reads an instance before deleting it.
func TestCleanupOwnership(t *testing.T) {
	e := newEnv(t)
	b := e.backend(t)
	now := time.Now().UTC().Truncate(time.Second)
	past := now.Add(-2 * time.Hour)

	ours, l := boxLabels(t, "gcp", "ready", past, nil)
	e.api.addInstance(zones[0], "ours", l)
	oursB, l := boxLabels(t, "gcp", "failed", now, nil)
	e.api.addInstance(zones[1], "ours-b", l)
	theirs, l := boxLabels(t, "gcp", "ready", past, nil)
	e.api.addInstance(zones[0], "theirs", l)
	kept, l := boxLabels(t, "gcp", "ready", past, func(l map[string]string) { l["keep"] = "true" })
	e.api.addInstance(zones[0], "kept", l)
	keptLive, l := boxLabels(t, "gcp", "ready", now, func(l map[string]string) { l["keep"] = "true" })
	e.api.addInstance(zones[1], "kept-live", l)
	awsLease, l := boxLabels(t, "aws", "failed", past, nil)
	e.api.addInstance(zones[0], "aws", l)
	prefixLease := lease.NewID()
	e.api.addInstance(zones[0], "crabbox-"+strings.ReplaceAll(prefixLease, "_", "-"), nil) // name only: not ours
	renewed, l := boxLabels(t, "gcp", "ready", past, nil)
	e.api.addInstance(zones[1], "renewed", l)
	fresh, l := boxLabels(t, "gcp", "provisioning", now, nil)
	e.api.addInstance(zones[0], "fresh", l)
	elsewhere, l := boxLabels(t, "gcp", "failed", past, nil)
	e.api.addInstance("asia-east1-a", "elsewhere", l) // a zone this client does not use

	claims := map[string]bool{ours: true, oursB: true, kept: true, keptLive: true, awsLease: true, prefixLease: true, renewed: true, fresh: true, elsewhere: true}
	claimed := func(id string) bool { return claims[id] }
	// The renewed lease is touched by its owner between listing and deleting.
	e.api.onGet = func(in *computepb.Instance) {
		if in.GetName() == "renewed" {
			in.Labels = maps.Clone(in.Labels)
			in.Labels["expires_at"] = strconv.FormatInt(now.Add(time.Hour).Unix(), 10)
		}
	}

	const others = "a gcp crabbox instance of the zones"
	cloudtest.CheckDecisions(t, "dry run", cloudtest.Decide(t, b, true, now, claimed), map[string]cloudtest.Outcome{
		ours:     cloudtest.WouldDelete("expired at"),
		oursB:    cloudtest.WouldDelete("state failed"),
		theirs:   cloudtest.Left("another client's box"),
		kept:     cloudtest.WouldDelete("expired at"),
		keptLive: cloudtest.Left("keep=true: kept while live until"),
		renewed:  cloudtest.WouldDelete("expired at"),
		fresh:    cloudtest.Left("live until"),
	}, others)
	if n := len(e.api.instanceList()); n != 10 || len(e.api.log()) != 0 {
		t.Fatalf("dry run changed the project: %d instances, mutations %v", n, e.api.log())
	}

	cloudtest.CheckDecisions(t, "cleanup", cloudtest.Decide(t, b, false, now, claimed), map[string]cloudtest.Outcome{
		ours:     cloudtest.Deleted("expired at"),
		oursB:    cloudtest.Deleted("state failed"),
		theirs:   cloudtest.Left("another client's box"),
		kept:     cloudtest.Deleted("expired at"),
		keptLive: cloudtest.Left("keep=true: kept while live until"),
		renewed:  cloudtest.Left("changed since listed: live until"),
		fresh:    cloudtest.Left("live until"),
	}, others)
	var left []string
	for _, in := range e.api.instanceList() {
		left = append(left, in.GetName())
	}
	slices.Sort(left)
	wantLeft := []string{"aws", "crabbox-" + strings.ReplaceAll(prefixLease, "_", "-"), "elsewhere", "fresh", "kept-live", "renewed", "theirs"}
	slices.Sort(wantLeft)
	if diff := cmp.Diff(wantLeft, left); diff != "" {
		t.Errorf("instances left (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"delete instance", "delete instance", "delete instance"}, events(e.api)); diff != "" {
		t.Errorf("API mutations (-want +got):\n%s", diff)
	}
}

// TestEndToEnd runs the library's one-shot workflow against the fake:
// acquire, sync a checkout, run a command over SSH, release.
func TestEndToEnd(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skipf("git unavailable: %v", err)
	}
	e := newEnv(t)
	reg := provider.NewRegistry()
	reg.Register(fixedProvider{build: func(rt provider.Runtime) (provider.Backend, error) { return gcp.New(e.cfg, rt) }})
	client, err := crabbox.New(crabbox.WithRegistry(reg), crabbox.WithProvider(gcp.Name),
		crabbox.WithStateDir(filepath.Join(t.TempDir(), "state")), crabbox.WithRuntime(e.rt))
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	repo := t.TempDir()
	if out, err := exec.Command("git", "-C", repo, "init", "-q").CombinedOutput(); err != nil {
		t.Fatalf("git init: %v: %s", err, out)
	}
	if err := os.WriteFile(filepath.Join(repo, "hello.txt"), []byte("hello from the box\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var stdout bytes.Buffer
	res, err := client.Run(context.Background(), crabbox.RunRequest{Root: repo, Shell: "cat hello.txt; exit 7", Stdout: &stdout})
	if err != nil {
		t.Fatal(err)
	}
	if res.ExitCode != 7 || stdout.String() != "hello from the box\n" || res.Provider != gcp.Name {
		t.Errorf("run = exit %d, output %q, provider %q; want 7, the synced file, gcp", res.ExitCode, stdout.String(), res.Provider)
	}
	want := []string{"insert firewall", "insert instance", "label instance state=ready", "delete instance"}
	got := events(e.api)
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("API mutations (-want +got):\n%s", diff)
	}
	if in := e.api.instanceList(); len(in) != 0 {
		t.Errorf("instances left: %v", in)
	}
}
