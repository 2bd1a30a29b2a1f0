package aws

import (
	"maps"
	"slices"

	awssdk "github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"

	"github.com/crabbox-dev/crabbox/providers/internal/cloud"
)

// Tags of instances beyond the ownership labels (which include the host
// key and the SSH port that answered). They are the provider's own: not
// part of a lease's labels, and not allowed as caller labels.
const (
	tagName     = "Name"      // shown in the EC2 console
	tagWorkRoot = "work_root" // the box's work root
)

var ownTags = []string{tagName, tagWorkRoot}

// Lifecycle states of instances that still exist (or may again).
var liveStates = []string{"pending", "running", "stopping", "stopped"}

// toTags turns a label map into EC2 tags, sorted by key.
func toTags(m map[string]string) []types.Tag {
	tags := make([]types.Tag, 0, len(m))
	for _, k := range slices.Sorted(maps.Keys(m)) {
		tags = append(tags, types.Tag{Key: awssdk.String(k), Value: awssdk.String(m[k])})
	}
	return tags
}

// fromTags turns EC2 tags into a map.
func fromTags(tags []types.Tag) map[string]string {
	m := make(map[string]string, len(tags))
	for _, t := range tags {
		m[awssdk.ToString(t.Key)] = awssdk.ToString(t.Value)
	}
	return m
}

// tagSpec is the TagSpecification tagging a resource type at creation.
func tagSpec(rt types.ResourceType, m map[string]string) types.TagSpecification {
	return types.TagSpecification{ResourceType: rt, Tags: toTags(m)}
}

// filters are DescribeX filters selecting resources by tag: tag:<key>=value.
func tagFilters(m map[string]string, more ...types.Filter) []types.Filter {
	fs := make([]types.Filter, 0, len(m)+len(more))
	for _, k := range slices.Sorted(maps.Keys(m)) {
		fs = append(fs, types.Filter{Name: awssdk.String("tag:" + k), Values: []string{m[k]}})
	}
	return append(fs, more...)
}

// ownership are the tag filters of every crabbox aws resource, or of the
// resources of one lease.
func ownership(leaseID string) map[string]string { return cloud.Ownership(Name, leaseID) }

// leaseLabels are a resource's tags without the provider's own tags: the
// ownership labels and the caller's labels.
func leaseLabels(tags map[string]string) map[string]string {
	out := maps.Clone(tags)
	for _, k := range ownTags {
		delete(out, k)
	}
	return out
}
