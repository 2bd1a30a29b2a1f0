package aws

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"strconv"
	"strings"

	awssdk "github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"

	"github.com/crabbox-dev/crabbox/provider"
	"github.com/crabbox-dev/crabbox/providers/internal/cloud"
)

// stepSecurityGroup is the acquire step that finds or creates the group.
const stepSecurityGroup cloud.Step = "security-group"

// defaultVPC returns the ID of the region's default VPC.
func defaultVPC(ctx context.Context, ec *ec2.Client, region string) (string, error) {
	out, err := ec.DescribeVpcs(ctx, &ec2.DescribeVpcsInput{
		Filters: []types.Filter{{Name: awssdk.String("is-default"), Values: []string{"true"}}},
	})
	if err != nil {
		return "", portable(err, "find the default VPC of "+region)
	}
	for _, v := range out.Vpcs {
		if id := awssdk.ToString(v.VpcId); id != "" {
			return id, nil
		}
	}
	return "", fmt.Errorf("aws: region %s has no default VPC; crabbox launches boxes into it: %w", region, provider.ErrPrecondition)
}

// SecurityGroupName is the name of crabbox's security group opening ports
// to cidr: one group per network and port set, so a group's rules never
// change under a running box.
func SecurityGroupName(cidr string, ports []int) string {
	h := sha256.Sum256([]byte(cidr + " " + fmt.Sprint(ports)))
	return "crabbox-ssh-" + hex.EncodeToString(h[:4])
}

// groupTags are the tags of crabbox's security groups: they belong to no
// lease, only to crabbox.
func groupTags() map[string]string {
	return map[string]string{cloud.LabelCrabbox: "true", cloud.LabelCreatedBy: "crabbox", cloud.LabelProvider: Name}
}

// ownedGroup reports whether crabbox created g (by its tags).
func ownedGroup(g types.SecurityGroup) bool {
	t := fromTags(g.Tags)
	return t[cloud.LabelCrabbox] == "true" && t[cloud.LabelCreatedBy] == "crabbox"
}

// findGroup returns the group named name in vpc, if any.
func findGroup(ctx context.Context, ec *ec2.Client, vpc, name string) (*types.SecurityGroup, error) {
	out, err := ec.DescribeSecurityGroups(ctx, &ec2.DescribeSecurityGroupsInput{Filters: []types.Filter{
		{Name: awssdk.String("group-name"), Values: []string{name}},
		{Name: awssdk.String("vpc-id"), Values: []string{vpc}},
	}})
	if err != nil {
		return nil, portable(err, "find security group "+name)
	}
	if len(out.SecurityGroups) == 0 {
		return nil, nil
	}
	return &out.SecurityGroups[0], nil
}

// securityGroup returns the ID of crabbox's group opening the SSH ports to
// the configured network in vpc, creating it if needed. A group of that
// name that crabbox did not create is refused. When this call creates the
// group it pushes its deletion onto rb, after the lease's instances are
// gone.
func (b *Backend) securityGroup(ctx context.Context, ec *ec2.Client, vpc, leaseID string, rb *cloud.Rollback) (string, error) {
	name := SecurityGroupName(b.cfg.SSHCIDR, b.cfg.SSHPorts)
	g, err := findGroup(ctx, ec, vpc, name)
	if err != nil {
		return "", err
	}
	if g == nil {
		rb.Add(stepSecurityGroup, "security group "+name, func(ctx context.Context) error {
			return b.deleteCreatedGroup(ctx, ec, vpc, name, leaseID)
		})
		out, err := ec.CreateSecurityGroup(ctx, &ec2.CreateSecurityGroupInput{
			GroupName:         awssdk.String(name),
			Description:       awssdk.String(fmt.Sprintf("crabbox boxes: SSH ports %s from %s", joinPorts(b.cfg.SSHPorts), b.cfg.SSHCIDR)),
			VpcId:             awssdk.String(vpc),
			TagSpecifications: []types.TagSpecification{tagSpec(types.ResourceTypeSecurityGroup, groupTags())},
		})
		switch {
		case err == nil:
			g = &types.SecurityGroup{GroupId: out.GroupId, GroupName: awssdk.String(name), Tags: out.Tags}
			if len(g.Tags) == 0 {
				g.Tags = toTags(groupTags())
			}
		case apiCode(err) == "InvalidGroup.Duplicate": // created by a concurrent acquire meanwhile
			if g, err = findGroup(ctx, ec, vpc, name); err != nil {
				return "", err
			}
			if g == nil {
				return "", fmt.Errorf("aws: security group %s exists and does not: %w", name, provider.ErrTransient)
			}
		default:
			return "", portable(err, "create security group "+name)
		}
	}
	if !ownedGroup(*g) {
		return "", fmt.Errorf("aws: security group %s (%s) in %s was not created by crabbox (no crabbox=true, created_by=crabbox tags); refusing to use it: %w",
			name, awssdk.ToString(g.GroupId), vpc, provider.ErrConflict)
	}
	if err := b.openPorts(ctx, ec, *g); err != nil {
		return "", err
	}
	return awssdk.ToString(g.GroupId), nil
}

// openPorts adds the ingress rules for the SSH ports from the configured
// network that g lacks.
func (b *Backend) openPorts(ctx context.Context, ec *ec2.Client, g types.SecurityGroup) error {
	var missing []types.IpPermission
	for _, port := range b.cfg.SSHPorts {
		if !hasRule(g.IpPermissions, port, b.cfg.SSHCIDR) {
			missing = append(missing, types.IpPermission{
				IpProtocol: awssdk.String("tcp"), FromPort: awssdk.Int32(int32(port)), ToPort: awssdk.Int32(int32(port)),
				IpRanges: []types.IpRange{{CidrIp: awssdk.String(b.cfg.SSHCIDR), Description: awssdk.String("crabbox SSH")}},
			})
		}
	}
	if len(missing) == 0 {
		return nil
	}
	_, err := ec.AuthorizeSecurityGroupIngress(ctx, &ec2.AuthorizeSecurityGroupIngressInput{GroupId: g.GroupId, IpPermissions: missing})
	if err != nil && apiCode(err) != "InvalidPermission.Duplicate" {
		return portable(err, "open SSH ports of security group "+awssdk.ToString(g.GroupId))
	}
	return nil
}

func hasRule(perms []types.IpPermission, port int, cidr string) bool {
	return slices.ContainsFunc(perms, func(p types.IpPermission) bool {
		if awssdk.ToString(p.IpProtocol) != "tcp" || int(awssdk.ToInt32(p.FromPort)) > port || int(awssdk.ToInt32(p.ToPort)) < port {
			return false
		}
		return slices.ContainsFunc(p.IpRanges, func(r types.IpRange) bool { return awssdk.ToString(r.CidrIp) == cidr })
	})
}

// deleteCreatedGroup is the rollback of a group this acquire created (or
// may have created, when the answer was lost): it waits until the lease's
// instances are terminated, which release the group, then deletes it. A
// group another lease's instance uses meanwhile is left alone.
func (b *Backend) deleteCreatedGroup(ctx context.Context, ec *ec2.Client, vpc, name, leaseID string) error {
	g, err := findGroup(ctx, ec, vpc, name)
	if err != nil || g == nil {
		return err
	}
	if !ownedGroup(*g) {
		return nil
	}
	if err := b.waitTerminated(ctx, ec, leaseID); err != nil {
		return err
	}
	id := awssdk.ToString(g.GroupId)
	_, err = ec.DeleteSecurityGroup(ctx, &ec2.DeleteSecurityGroupInput{GroupId: g.GroupId})
	switch {
	case err == nil, notFound(err):
		return nil
	case apiCode(err) == "DependencyViolation":
		b.rt.Logger.Info("security group in use by another lease: kept", "group", id)
		return nil
	}
	return portable(err, "delete security group "+id)
}

func joinPorts(ports []int) string {
	s := make([]string, len(ports))
	for i, p := range ports {
		s[i] = strconv.Itoa(p)
	}
	return strings.Join(s, ", ")
}
