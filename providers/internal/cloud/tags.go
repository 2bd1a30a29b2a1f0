package cloud

import (
	"maps"
	"slices"
	"strings"
)

// Tags renders labels as the "key=value" string tags of clouds that tag
// resources with plain strings (Scaleway, Vultr), sorted by key.
func Tags(labels map[string]string) []string {
	out := make([]string, 0, len(labels))
	for _, k := range slices.Sorted(maps.Keys(labels)) {
		out = append(out, Tag(k, labels[k]))
	}
	return out
}

// Tag is one label as a string tag.
func Tag(key, value string) string { return key + "=" + value }

// TagLabels reads labels back from string tags, ignoring tags that are not
// "key=value" with a valid key (tags someone else added).
func TagLabels(tags []string) map[string]string {
	out := map[string]string{}
	for _, t := range tags {
		k, v, ok := strings.Cut(t, "=")
		if ok && CheckKey(k) == nil {
			out[k] = v
		}
	}
	return out
}
