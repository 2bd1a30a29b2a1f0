package aws

import (
	"errors"
	"fmt"
	"testing"

	awssdk "github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"github.com/aws/smithy-go"

	"github.com/crabbox-dev/crabbox/provider"
)

func TestArchOf(t *testing.T) {
	for typ, want := range map[string]string{
		"t3.small": ArchAMD64, "m7i.large": ArchAMD64, "g5.xlarge": ArchAMD64, "c5n.large": ArchAMD64, "p4d.24xlarge": ArchAMD64,
		"t4g.small": ArchARM64, "c7gn.large": ArchARM64, "m6gd.large": ArchARM64, "g5g.xlarge": ArchARM64, "im4gn.large": ArchARM64,
		"r8g.medium": ArchARM64, "x2gd.large": ArchARM64,
	} {
		if got := archOf(typ); got != want {
			t.Errorf("archOf(%q) = %s, want %s", typ, got, want)
		}
	}
}

func TestPortableErrors(t *testing.T) {
	for code, want := range map[string]error{
		"InsufficientInstanceCapacity": provider.ErrCapacity,
		"SpotMaxPriceTooLow":           provider.ErrCapacity,
		"MaxSpotInstanceCountExceeded": provider.ErrCapacity,
		"VcpuLimitExceeded":            provider.ErrCapacity,
		"AuthFailure":                  provider.ErrUnauthenticated,
		"UnauthorizedOperation":        provider.ErrUnauthenticated,
		"InvalidInstanceID.NotFound":   provider.ErrNotFound,
		"InvalidGroup.Duplicate":       provider.ErrConflict,
		"DependencyViolation":          provider.ErrConflict,
		"RequestLimitExceeded":         provider.ErrTransient,
		"InvalidParameterValue":        nil,
	} {
		raw := &smithy.GenericAPIError{Code: code, Message: "m"}
		err := portable(fmt.Errorf("op: %w", raw), "do it")
		for _, kind := range []error{provider.ErrCapacity, provider.ErrUnauthenticated, provider.ErrNotFound, provider.ErrConflict, provider.ErrTransient} {
			if errors.Is(err, kind) != (kind == want) {
				t.Errorf("%s: errors.Is(%v, %v) = %v", code, err, kind, !(kind == want))
			}
		}
		var api smithy.APIError
		if !errors.As(err, &api) || api.ErrorCode() != code {
			t.Errorf("%s: the SDK error is not reachable with errors.As: %v", code, err)
		}
	}
	if portable(nil, "x") != nil {
		t.Error("portable(nil) is not nil")
	}
}

func TestSecurityGroupName(t *testing.T) {
	a := SecurityGroupName("203.0.113.0/24", []int{2222, 22})
	if a != SecurityGroupName("203.0.113.0/24", []int{2222, 22}) {
		t.Error("name is not stable")
	}
	if a == SecurityGroupName("198.51.100.0/24", []int{2222, 22}) || a == SecurityGroupName("203.0.113.0/24", []int{22}) {
		t.Error("different networks or ports share a group name")
	}
}

// FuzzTarget feeds arbitrary instance tags and addresses (provider
// responses) to the conversion into a lease target: it must never panic,
// and what it accepts names a crabbox lease.
func FuzzTarget(f *testing.F) {
	f.Add("cbx_0123456789ab", "2222", "9999999999", "ready", "203.0.113.9", "ssh-ed25519 AAAA")
	f.Add("web-1", "22x", "-1", "", "", "")
	b := &Backend{cfg: Config{SSHPorts: DefaultSSHPorts, WorkRoot: DefaultWorkRoot}}
	f.Fuzz(func(t *testing.T, leaseID, port, expires, state, ip, hostKey string) {
		in := types.Instance{
			InstanceId: awssdk.String("i-1"), PublicIpAddress: awssdk.String(ip),
			Tags: toTags(map[string]string{
				"crabbox": "true", "provider": Name, "lease": leaseID, "ssh_port": port,
				"expires_at": expires, "state": state, "host_key": hostKey,
			}),
		}
		target, err := b.target(in)
		if err != nil {
			return
		}
		if target.LeaseID != leaseID || target.Port <= 0 || target.Port > 65535 || target.WorkRoot == "" {
			t.Errorf("target(%v) = %+v", in.Tags, target)
		}
	})
}
