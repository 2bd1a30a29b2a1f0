package docker

import (
	"fmt"
	"maps"
	"strconv"
	"time"

	"github.com/crabbox-dev/crabbox/lease"
	"github.com/crabbox-dev/crabbox/provider"
)

// Ownership labels on every container, named as on crabbox's cloud boxes.
// Docker labels cannot change after creation, so expires_at is the expiry
// the box was made with; Touch moves the expiry in the lease record inside
// the container, which is what the box's agent and List go by.
const (
	labelCrabbox   = "crabbox"    // "true"
	labelCreatedBy = "created_by" // "crabbox"
	labelProvider  = "provider"   // Name
	labelLease     = "lease"      // the lease ID
	labelSlug      = "slug"
	labelKeep      = "keep"              // "true" or "false"
	labelCreatedAt = "created_at"        // Unix seconds
	labelExpiresAt = "expires_at"        // Unix seconds, at creation
	labelTTL       = "ttl_secs"          // seconds
	labelIdle      = "idle_timeout_secs" // seconds
	// labelHostKey is the box's public host key (authorized_keys form),
	// which Resolve reports without reading the lease record out of the
	// container.
	labelHostKey = "host_key"
	// labelCheckpoint and labelSourceLease are on a checkpoint image (see
	// checkpoint.go) and on every box started from one: the checkpoint's
	// ID and the lease it was made of.
	labelCheckpoint  = provider.LabelCheckpoint
	labelSourceLease = provider.LabelSourceLease
)

var reservedLabels = map[string]bool{
	labelCrabbox: true, labelCreatedBy: true, labelProvider: true, labelLease: true, labelSlug: true,
	labelKeep: true, labelCreatedAt: true, labelExpiresAt: true, labelTTL: true, labelIdle: true,
	labelHostKey: true, labelCheckpoint: true, labelSourceLease: true,
}

// checkExtraLabel rejects a caller's label that would shadow an ownership
// label.
func checkExtraLabel(key string) error {
	if key == "" {
		return fmt.Errorf("empty label key")
	}
	if reservedLabels[key] {
		return fmt.Errorf("label %q is reserved for crabbox's ownership labels", key)
	}
	return nil
}

// boxLabels are the labels of a new container: the configured extra
// labels, the caller's, then the ownership labels.
func boxLabels(extra, caller map[string]string, id, slug string, created, expires time.Time, ttl, idle time.Duration, keep bool) map[string]string {
	l := make(map[string]string, len(extra)+len(caller)+len(reservedLabels))
	maps.Copy(l, extra)
	maps.Copy(l, caller)
	l[labelCrabbox] = "true"
	l[labelCreatedBy] = "crabbox"
	l[labelProvider] = Name
	l[labelLease] = id
	l[labelSlug] = slug
	l[labelKeep] = strconv.FormatBool(keep)
	l[labelCreatedAt] = strconv.FormatInt(created.Unix(), 10)
	l[labelExpiresAt] = strconv.FormatInt(expires.Unix(), 10)
	l[labelTTL] = strconv.FormatInt(int64(ttl/time.Second), 10)
	l[labelIdle] = strconv.FormatInt(int64(idle/time.Second), 10)
	return l
}

// owned reports whether labels mark a container as a crabbox box of this
// provider with a well-formed lease ID.
func owned(labels map[string]string) bool {
	return labels[labelCrabbox] == "true" && labels[labelProvider] == Name && lease.IsID(labels[labelLease])
}

// userLabels are a container's labels without the ownership labels, and
// without those a box started from a checkpoint hides (see maskLabels).
func userLabels(labels map[string]string) map[string]string {
	out := map[string]string{}
	masked := labels[labelCheckpoint] != ""
	for k, v := range labels {
		if !reservedLabels[k] && !(masked && v == "") {
			out[k] = v
		}
	}
	return out
}

// maskLabels returns labels with an empty value added for every key of
// inherited it does not have. The engine gives an image the labels of the
// container it is committed from, and a container those of its image,
// unless they are set: docker has no way to drop a label, so a checkpoint
// image hides its box's labels this way, and a box started from it the
// image's. The empty labels are left out wherever crabbox reports labels.
func maskLabels(labels, inherited map[string]string) map[string]string {
	out := maps.Clone(labels)
	for k := range inherited {
		if _, ok := out[k]; !ok {
			out[k] = ""
		}
	}
	return out
}

// unixLabel parses a Unix-seconds label; the zero time when it is absent
// or malformed.
func unixLabel(labels map[string]string, key string) time.Time {
	n, err := strconv.ParseInt(labels[key], 10, 64)
	if err != nil || n <= 0 {
		return time.Time{}
	}
	return time.Unix(n, 0).UTC()
}
