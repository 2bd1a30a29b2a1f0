package aws

import (
	"context"
	"fmt"
	"time"

	awssdk "github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"

	"github.com/crabbox-dev/crabbox/provider"
)

// canonicalOwner is the AWS account that publishes the official Ubuntu
// images.
const canonicalOwner = "099720109477"

// ubuntuImageName is the name pattern of Canonical's Ubuntu 24.04 LTS
// server images on gp3 volumes, by crabbox architecture.
var ubuntuImageName = map[string]string{
	ArchAMD64: "ubuntu/images/hvm-ssd-gp3/ubuntu-noble-24.04-amd64-server-*",
	ArchARM64: "ubuntu/images/hvm-ssd-gp3/ubuntu-noble-24.04-arm64-server-*",
}

// ec2Arch is EC2's name of each architecture.
var ec2Arch = map[string]string{ArchAMD64: "x86_64", ArchARM64: "arm64"}

// image is the machine image to boot.
type image struct {
	ID         string
	RootDevice string // where the root volume attaches, e.g. /dev/sda1
}

// findImage returns the configured image, or the newest available Ubuntu
// LTS image Canonical publishes for the configured architecture.
func (b *Backend) findImage(ctx context.Context, ec *ec2.Client, region string) (image, error) {
	in := &ec2.DescribeImagesInput{ImageIds: []string{b.cfg.Image}}
	what := "image " + b.cfg.Image
	if b.cfg.Image == "" {
		what = fmt.Sprintf("the newest Ubuntu 24.04 LTS image for %s", b.cfg.Arch)
		in = &ec2.DescribeImagesInput{
			Owners: []string{canonicalOwner},
			Filters: []types.Filter{
				{Name: awssdk.String("name"), Values: []string{ubuntuImageName[b.cfg.Arch]}},
				{Name: awssdk.String("architecture"), Values: []string{ec2Arch[b.cfg.Arch]}},
				{Name: awssdk.String("state"), Values: []string{"available"}},
			},
		}
	}
	out, err := ec.DescribeImages(ctx, in)
	if err != nil {
		return image{}, portable(err, "find "+what+" in "+region)
	}
	var best *types.Image
	var bestTime time.Time
	for i, im := range out.Images {
		created, err := time.Parse(time.RFC3339, awssdk.ToString(im.CreationDate))
		if err != nil && b.cfg.Image == "" {
			continue
		}
		if best == nil || created.After(bestTime) {
			best, bestTime = &out.Images[i], created
		}
	}
	if best == nil {
		return image{}, fmt.Errorf("aws: found no %s in %s: %w", what, region, provider.ErrPrecondition)
	}
	root := awssdk.ToString(best.RootDeviceName)
	if root == "" {
		root = "/dev/sda1"
	}
	return image{ID: awssdk.ToString(best.ImageId), RootDevice: root}, nil
}
