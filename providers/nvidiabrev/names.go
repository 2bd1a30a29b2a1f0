package nvidiabrev

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/crabbox-dev/crabbox/providers/internal/cloud"
)

// Brev's API keeps no label a client can read back or change: a
// workspace's create-time labels are write-only in Brev's published
// client, and the only field that a client both changes (PUT
// /api/workspaces/{id}) and reads back is the name. So the name carries
// the labels crabbox's lifecycle decides on:
//
//	cbx-<12 hex of the lease ID>-<state><keep><ssh port>-<expiry>[-<slug>]
//
// state is one letter (p provisioning, r ready, u running, x released,
// f failed), keep k or n, the SSH port its index in the configured ports
// (0-9) or z when not known yet, the expiry Unix seconds in 7 base-36
// digits. Everything else (owner, class, creation time, caller labels)
// goes only into the create-time labels, for people reading Brev's
// console. A name that does not match exactly is not crabbox's.

// MaxNameLength is the longest Brev instance name (brev-cli
// pkg/names/validate.go).
const MaxNameLength = 63

// MaxSlugLength is the longest slug a name has room for.
const MaxSlugLength = MaxNameLength - len("cbx-0123456789ab-rn0-0000000-")

var nameRE = sync.OnceValue(func() *regexp.Regexp {
	return regexp.MustCompile(`^cbx-([0-9a-f]{12})-([pruxf])([kn])([0-9z])-([0-9a-z]{7})(?:-([a-z0-9][a-z0-9-]*))?$`)
})

var stateLetters = map[string]string{
	cloud.StateProvisioning: "p", cloud.StateReady: "r", cloud.StateRunning: "u",
	cloud.StateReleased: "x", cloud.StateFailed: "f",
}

// maxExpiry is the largest expiry 7 base-36 digits hold.
const maxExpiry = 78364164095 // 36^7 - 1

// encodeName renders the lifecycle labels as a name; ports are the
// configured SSH ports. It fails, naming the label, when one is missing
// or does not fit.
func encodeName(l map[string]string, ports []int) (string, error) {
	id, ok := strings.CutPrefix(l[cloud.LabelLease], "cbx_")
	if !ok || len(id) != 12 {
		return "", fmt.Errorf("instance name: lease label %q is not a crabbox lease ID", l[cloud.LabelLease])
	}
	st, ok := stateLetters[l[cloud.LabelState]]
	if !ok {
		return "", fmt.Errorf("instance name: state %q has no letter", l[cloud.LabelState])
	}
	keep := "n"
	if l[cloud.LabelKeep] == "true" {
		keep = "k"
	}
	port := "z"
	if p := l[cloud.LabelSSHPort]; p != "" {
		i := -1
		for j, q := range ports {
			if strconv.Itoa(q) == p {
				i = j
			}
		}
		if i < 0 || i > 9 {
			return "", fmt.Errorf("instance name: SSH port %s is not one of the ports %v", p, ports)
		}
		port = strconv.Itoa(i)
	}
	exp, err := strconv.ParseInt(l[cloud.LabelExpiresAt], 10, 64)
	if err != nil || exp < 0 || exp > maxExpiry {
		return "", fmt.Errorf("instance name: expiry %q is not a Unix time up to %s", l[cloud.LabelExpiresAt], time.Unix(maxExpiry, 0).UTC().Format(time.RFC3339))
	}
	name := fmt.Sprintf("cbx-%s-%s%s%s-%07s", id, st, keep, port, strconv.FormatInt(exp, 36))
	if slug := l[cloud.LabelSlug]; slug != "" {
		name += "-" + slug
	}
	if len(name) > MaxNameLength || !nameRE().MatchString(name) {
		return "", fmt.Errorf("instance name: slug %q does not fit a Brev name (at most %d lowercase letters, digits and '-')", l[cloud.LabelSlug], MaxSlugLength)
	}
	return name, nil
}

// decodeName reads the lifecycle labels back from a name; ok is false for
// a name that is not crabbox's.
func decodeName(name string, ports []int) (map[string]string, bool) {
	m := nameRE().FindStringSubmatch(name)
	if m == nil {
		return nil, false
	}
	exp, err := strconv.ParseInt(m[5], 36, 64)
	if err != nil {
		return nil, false
	}
	l := map[string]string{
		cloud.LabelCrabbox: "true", cloud.LabelCreatedBy: "crabbox", cloud.LabelProvider: Name,
		cloud.LabelLease: "cbx_" + m[1], cloud.LabelKeep: strconv.FormatBool(m[3] == "k"),
		cloud.LabelExpiresAt: strconv.FormatInt(exp, 10), cloud.LabelTarget: "linux",
	}
	for s, letter := range stateLetters {
		if letter == m[2] {
			l[cloud.LabelState] = s
		}
	}
	if m[4] != "z" {
		i, _ := strconv.Atoi(m[4])
		if i >= len(ports) {
			return nil, false
		}
		l[cloud.LabelSSHPort] = strconv.Itoa(ports[i])
	}
	if m[6] != "" {
		l[cloud.LabelSlug] = m[6]
	}
	return l, true
}
