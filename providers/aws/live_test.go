//go:build live

package aws_test

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/crabbox-dev/crabbox/provider"
	"github.com/crabbox-dev/crabbox/provider/providertest"
	"github.com/crabbox-dev/crabbox/providers/aws"
)

// TestLive runs the conformance suite against real EC2, with credentials
// from the AWS SDK's standard chain. It creates and deletes several small
// instances. Run it with:
//
//	CRABBOX_AWS_LIVE_SSH_CIDR=$(curl -s https://checkip.amazonaws.com)/32 \
//	CRABBOX_AWS_LIVE_REGION=us-east-1 \
//	go test -tags live -run TestLive -timeout 60m ./providers/aws/
func TestLive(t *testing.T) {
	cidr := os.Getenv("CRABBOX_AWS_LIVE_SSH_CIDR")
	if cidr == "" {
		t.Skip("set CRABBOX_AWS_LIVE_SSH_CIDR (this machine's public address as a /32) to run against real EC2")
	}
	cfg := provider.Config{"ssh-cidr": cidr, "instance-type": "t3.micro"}
	if r := os.Getenv("CRABBOX_AWS_LIVE_REGION"); r != "" {
		cfg["regions"] = strings.TrimSpace(r)
	}
	providertest.RunSSHLease(t, providertest.Harness{
		Timeout: 20 * time.Minute,
		NewBackend: func(t *testing.T) provider.SSHLeaseBackend {
			b, err := aws.Provider{}.Configure(cfg, provider.Runtime{})
			if err != nil {
				t.Fatal(err)
			}
			return b.(*aws.Backend)
		},
	})
}
