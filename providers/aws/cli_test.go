package aws_test

import (
	"path/filepath"
	"testing"

	"github.com/crabbox-dev/crabbox/providers/aws"
	"github.com/crabbox-dev/crabbox/providers/internal/cloud/cloudtest"
)

// TestInstalledCLI runs the provider as a user does: the crabbox command
// and crabbox-provider-aws built and installed side by side, `crabbox run
// --provider aws` against the fake EC2, with the provider in its own
// process. The fake's instances are reachable for real (a loopback fleet:
// every instance its own 127.x.y.z address, sshd on port 2222 there),
// since no Go hook reaches into the provider program. The credentials
// come from the environment, as the SDK's standard chain reads them; its
// shared config files are kept away so that nothing of the machine's leaks
// in.
func TestInstalledCLI(t *testing.T) {
	none := filepath.Join(t.TempDir(), "none")
	run := cloudtest.InstalledCLI(t, "aws",
		"AWS_ACCESS_KEY_ID="+fakeAccessKey, "AWS_SECRET_ACCESS_KEY="+fakeSecret, "AWS_SESSION_TOKEN=",
		"AWS_PROFILE=", "AWS_REGION=", "AWS_DEFAULT_REGION=", "AWS_CONFIG_FILE="+none,
		"AWS_SHARED_CREDENTIALS_FILE="+none, "AWS_EC2_METADATA_DISABLED=true",
		// An acquire option, which status and stop do not take as a flag.
		"CRABBOX_AWS_SSH_CIDR="+sshCIDR)
	w := newWorldOf(t, cloudtest.NewLoopbackFleet(t))
	flags := []string{"--provider", "aws", "--aws-endpoint", w.url, "--aws-regions", region, "--aws-work-root", t.TempDir()}

	cloudtest.CLIRuns(t, run, "aws", flags, func(t *testing.T) {
		if a := w.actions(); !cloudtest.InOrder(a, "RunInstances", "TerminateInstances") {
			t.Errorf("fake EC2 actions %q: want the instance run, then terminated at release", a)
		}
	}, func(t *testing.T) { checkReleased(t, w) })
	t.Run("checkpoint", func(t *testing.T) {
		cloudtest.CLICheckpoint(t, run, flags, func(t *testing.T) { checkReleased(t, w) })
	})
}

// checkReleased fails unless the fake region has no live instance, no key
// pair, no volume and no running box, and at most crabbox's shared
// security group, which release keeps for the next lease (cleanup deletes
// it).
func checkReleased(t *testing.T, w *world) {
	t.Helper()
	if in := w.ec2.Instances(region); len(in) != 0 {
		t.Errorf("instances left: %+v", in)
	}
	if k := w.ec2.KeyPairs(region); len(k) != 0 {
		t.Errorf("key pairs left: %+v", k)
	}
	if v := w.ec2.Volumes(region); len(v) != 0 {
		t.Errorf("volumes left: %+v", v)
	}
	shared := aws.SecurityGroupName(sshCIDR, aws.DefaultSSHPorts)
	for _, g := range w.ec2.SecurityGroups(region) {
		if g.Name != shared {
			t.Errorf("security group left: %+v, want only the shared %s", g, shared)
		}
	}
	if r := w.fleet.Running(); len(r) != 0 {
		t.Errorf("boxes still running: %v", r)
	}
}
