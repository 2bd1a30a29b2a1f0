package aws_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/jonboulle/clockwork"

	"github.com/crabbox-dev/crabbox"
	"github.com/crabbox-dev/crabbox/lease"
	"github.com/crabbox-dev/crabbox/provider"
	"github.com/crabbox-dev/crabbox/providers/aws"
	"github.com/crabbox-dev/crabbox/providers/aws/internal/fakeec2"
	"github.com/crabbox-dev/crabbox/providers/internal/cloud/cloudtest"
)

// Environment of the acquiring child process of TestCleanupAfterCrash.
const (
	childEndpoint = "CRABBOX_AWS_TEST_CHILD_ENDPOINT"
	childState    = "CRABBOX_AWS_TEST_CHILD_STATE"
	childWorkRoot = "CRABBOX_AWS_TEST_CHILD_WORK_ROOT"
)

// acquireChild is the child process: it acquires a lease through the
// library into the lease store, and is killed while it waits.
func acquireChild() int {
	b, err := aws.New(aws.Config{
		Regions: []string{region}, SSHCIDR: sshCIDR, WorkRoot: os.Getenv(childWorkRoot),
		Endpoint:    os.Getenv(childEndpoint),
		Credentials: credentials.NewStaticCredentialsProvider(fakeAccessKey, fakeSecret, ""),
	}, provider.Runtime{})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	store, err := lease.OpenStore(os.Getenv(childState))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	_, err = store.Acquire(context.Background(), b, lease.Terms{Slug: "crashed-crab"})
	fmt.Fprintln(os.Stderr, "acquire returned:", err)
	return 1
}

// TestCleanupAfterCrash kills the process acquiring a lease after its
// instance was created (while it waits for the address), then shows that
// cleanup finds the instance from the claim the process left and deletes
// it and the key pair.
func TestCleanupAfterCrash(t *testing.T) {
	w := newWorld(t)
	state := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	waiting := make(chan struct{})
	w.ec2.Inject(fakeec2.Fault{Action: "DescribeInstances", Match: describesInstance, Hang: true, Times: 1, OnHang: func() { close(waiting) }})

	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEndpoint+"="+w.url, childState+"="+state, childWorkRoot+"="+t.TempDir())
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	select {
	case <-waiting:
	case err := <-exited:
		t.Fatalf("acquiring process ended before it was killed: %v", err)
	case <-ctx.Done():
		t.Fatal("the acquiring process never waited for its instance's address")
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-exited

	insts := w.ec2.Instances(region)
	if len(insts) != 1 || len(w.ec2.KeyPairs(region)) != 1 {
		t.Fatalf("after the crash: instances %+v, key pairs %+v; want one each", insts, w.ec2.KeyPairs(region))
	}

	// Two hours later (past the acquire grace), cleanup of this client.
	clock := clockwork.NewFakeClockAt(time.Now().Add(2 * time.Hour))
	reg := provider.NewRegistry()
	reg.Register(fixedProvider{build: func(rt provider.Runtime) (provider.Backend, error) {
		cfg := w.config(t)
		return aws.New(cfg, rt)
	}})
	client, err := crabbox.New(crabbox.WithRegistry(reg), crabbox.WithStateDir(state), crabbox.WithProvider(aws.Name),
		crabbox.WithRuntime(w.runtime(t, clock)))
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	claims, err := cloudtest.Store(t, client.StateDir()).List()
	if err != nil || len(claims) != 1 || claims[0].State != lease.StateAcquiring {
		t.Fatalf("claims after the crash = %+v, %v; want one acquiring", claims, err)
	}

	ds, err := client.Cleanup(ctx, crabbox.CleanupOptions{Provider: aws.Name, DryRun: true})
	if err != nil {
		t.Fatal(err)
	}
	if !hasDecision(ds, claims[0].ID, crabbox.CleanupDelete, "dry run") {
		t.Errorf("dry-run decisions = %+v, want the crashed lease deleted on a real run", ds)
	}
	if len(w.ec2.Instances(region)) != 1 {
		t.Fatal("dry run deleted the instance")
	}

	ds, err = client.Cleanup(ctx, crabbox.CleanupOptions{Provider: aws.Name})
	if err != nil {
		t.Fatal(err)
	}
	if !hasDecision(ds, claims[0].ID, crabbox.CleanupDelete, "deleted") {
		t.Errorf("decisions = %+v, want the crashed lease deleted", ds)
	}
	if got, _ := w.ec2.Instance(region, insts[0].ID); got.State != "terminated" {
		t.Errorf("crashed lease's instance is %s", got.State)
	}
	if k := w.ec2.KeyPairs(region); len(k) != 0 {
		t.Errorf("key pairs left: %+v", k)
	}
	if left, _ := cloudtest.Store(t, client.StateDir()).List(); len(left) != 0 {
		t.Errorf("claims left: %+v", left)
	}
}

func hasDecision(ds []crabbox.CleanupOutcome, id string, action crabbox.CleanupAction, result string) bool {
	for _, d := range ds {
		if d.LeaseID == id && d.Action == action && d.Result == result {
			return true
		}
	}
	return false
}

// fixedProvider is the aws provider with a configuration only a Go
// program can give (the fake endpoint and credentials).
type fixedProvider struct {
	build func(provider.Runtime) (provider.Backend, error)
}

func (fixedProvider) Spec() provider.Spec { return aws.Provider{}.Spec() }

func (p fixedProvider) Configure(_ provider.Config, rt provider.Runtime) (provider.Backend, error) {
	return p.build(rt)
}
