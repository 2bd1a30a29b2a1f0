package aws

import (
	"context"
	"fmt"

	"github.com/crabbox-dev/crabbox/provider"
	"github.com/crabbox-dev/crabbox/providers/internal/cloud"
)

var _ provider.DoctorBackend = (*Backend)(nil)

// Doctor checks, without changing anything, what creating a box needs: the
// ssh-cidr option is set, the SDK's standard chain finds credentials (their
// source is named, never their value), and, with credentials, that EC2
// answers through the configured endpoint in the region boxes are created
// in: it has a default VPC and the box image. Missing settings name their
// flag and environment variable.
func (b *Backend) Doctor(ctx context.Context) ([]provider.Check, error) {
	cidr := cloud.SourceRangeCheck("ssh-cidr", "aws-ssh-cidr", b.cfg.SSHCIDR)
	checks := []provider.Check{cidr}

	creds := provider.Check{Name: "credentials"}
	if err := b.authenticate(ctx); err != nil {
		creds.Detail = err.Error() + "; give the SDK credentials the usual way (AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, `aws configure`, `aws sso login`, an instance role) or choose a profile with --aws-profile or CRABBOX_AWS_PROFILE"
		return append(checks, creds), nil
	}
	c, _ := b.sdk.Credentials.Retrieve(ctx) // cached by authenticate
	creds.OK, creds.Detail = true, "found"
	if c.Source != "" {
		creds.Detail += " (" + c.Source + ")"
	}
	checks = append(checks, creds)

	region := b.cfg.Regions[0]
	ec := b.ec2Client(region)
	api := provider.Check{Name: "EC2 API " + region}
	vpc, err := defaultVPC(ctx, ec, region)
	if err != nil {
		api.Detail = err.Error()
		return append(checks, api), nil
	}
	api.OK, api.Detail = true, "default VPC "+vpc
	checks = append(checks, api)

	img := provider.Check{Name: "image"}
	if im, err := b.findImage(ctx, ec, region); err != nil {
		img.Detail = err.Error()
	} else {
		img.OK, img.Detail = true, fmt.Sprintf("%s in %s", im.ID, region)
	}
	return append(checks, img), nil
}
