package coordinator

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"golang.org/x/crypto/ssh"

	"github.com/crabbox-dev/crabbox/coordinator/api"
)

// DefaultSSHUser is a box's login when neither request nor provider names one.
const DefaultSSHUser = "crabbox"

var (
	providerName = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,63}$`)
	sshUserName  = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_.-]{0,31}$`)
	labelKey     = regexp.MustCompile(`^[a-z0-9][a-z0-9_.-]{0,62}$`)
	labelValue   = regexp.MustCompile(`^[A-Za-z0-9_.-]{0,63}$`)
)

const (
	maxLabels       = 32
	maxFallbackPort = 8
	maxShortField   = 128
	maxPathField    = 1024
	maxKeyField     = 16 << 10
)

// ownershipLabels are the label keys providers set on boxes themselves
// (see the ownership labels in the reference); callers may not set them.
var ownershipLabels = map[string]bool{
	"crabbox": true, "created_by": true, "provider": true, "lease": true, "slug": true,
	"owner": true, "class": true, "server_type": true, "target": true, "keep": true,
	"state": true, "created_at": true, "last_touched_at": true, "expires_at": true,
	"idle_timeout_secs": true, "ttl_secs": true, "host_key": true, "ssh_port": true,
}

// Labels the coordinator adds to every box it provisions.
const (
	labelRequestedBy = "requested_by"
	labelOrg         = "org"
)

// leaseSpec is a validated, normalised lease request: defaults applied,
// durations clamped.
type leaseSpec struct {
	LeaseID          string            `json:"leaseID"`
	Slug             string            `json:"slug"`
	Provider         string            `json:"provider"`
	Target           string            `json:"target"`
	Class            string            `json:"class"`
	ServerType       string            `json:"serverType"`
	Location         string            `json:"location"`
	Image            string            `json:"image"`
	SSHUser          string            `json:"sshUser"`
	SSHPort          string            `json:"sshPort"`
	SSHFallbackPorts []string          `json:"sshFallbackPorts"`
	SSHPublicKey     string            `json:"sshPublicKey"`
	WorkRoot         string            `json:"workRoot"`
	TTLSeconds       int64             `json:"ttlSeconds"`
	IdleSeconds      int64             `json:"idleTimeoutSeconds"`
	Keep             bool              `json:"keep"`
	Labels           map[string]string `json:"labels"`
}

// hash fingerprints the spec for fixed-ID replays: the same normalised
// request gives the same hash. json.Marshal sorts map keys, so the encoding
// is canonical.
func (s leaseSpec) hash() string {
	b, _ := json.Marshal(s) // a leaseSpec always marshals
	sum := sha256.Sum256(append([]byte("crabbox-lease-request/v1\n"), b...))
	return hex.EncodeToString(sum[:])
}

// normalizeLeaseRequest validates req and applies the defaults.
func (s *Server) normalizeLeaseRequest(req api.LeaseRequest) (leaseSpec, *apiError) {
	n := leaseSpec{
		LeaseID: req.LeaseID, Slug: req.Slug, Keep: req.Keep,
		Class: req.Class, ServerType: req.ServerType, Location: req.Location, Image: string(req.Image),
		WorkRoot: req.WorkRoot, SSHPublicKey: strings.TrimSpace(req.SSHPublicKey),
	}
	if n.LeaseID != "" && !api.IsLeaseID(n.LeaseID) {
		return n, invalid("field %q: %s is not a lease ID (cbx_ and 12 lowercase hex digits)", "leaseID", quote(n.LeaseID))
	}
	if n.Slug != "" && !api.IsSlug(n.Slug) {
		return n, invalid("field %q: %s is not a slug (lowercase letters, digits and single dashes, at most %d characters)", "slug", quote(n.Slug), api.MaxSlugLen)
	}
	var e *apiError
	if n.Provider, e = s.providerField(req.Provider); e != nil {
		return n, e
	}
	if n.Target, e = targetField(req.Target); e != nil {
		return n, e
	}
	for _, f := range []struct{ name, v string }{
		{"class", n.Class}, {"serverType", n.ServerType}, {"location", n.Location},
	} {
		if e := textField(f.name, f.v, maxShortField); e != nil {
			return n, e
		}
	}
	if e := textField("image", n.Image, maxPathField); e != nil {
		return n, e
	}
	if e := textField("workRoot", n.WorkRoot, maxPathField); e != nil {
		return n, e
	}
	if n.SSHPublicKey == "" {
		return n, invalid("field %q is required", "sshPublicKey")
	}
	if e := publicKeyField(n.SSHPublicKey); e != nil {
		return n, e
	}
	if n.SSHUser, e = sshUserField(req.SSHUser); e != nil {
		return n, e
	}
	if n.SSHPort, n.SSHFallbackPorts, e = portFields(req.SSHPort, req.SSHFallbackPorts); e != nil {
		return n, e
	}
	if n.TTLSeconds, e = secondsField("ttlSeconds", req.TTLSeconds, api.DefaultTTLSeconds); e != nil {
		return n, e
	}
	if n.IdleSeconds, e = secondsField("idleTimeoutSeconds", req.IdleTimeoutSeconds, api.DefaultIdleTimeoutSeconds); e != nil {
		return n, e
	}
	if n.Labels, e = labelsField(req.Labels, true); e != nil {
		return n, e
	}
	return n, nil
}

// providerField normalises a provider name; empty means the default.
func (s *Server) providerField(v string) (string, *apiError) {
	v = strings.ToLower(strings.TrimSpace(v))
	if v == "" {
		v = s.defProv
	}
	if v == "" {
		return "", invalid("field %q is required (configured: %s)", "provider", s.providerNames())
	}
	if !providerName.MatchString(v) {
		return "", invalid("field %q: %s is not a provider name", "provider", quote(v))
	}
	return v, nil
}

func targetField(t api.Target) (string, *apiError) {
	switch t {
	case "":
		return string(api.TargetLinux), nil
	case api.TargetLinux, api.TargetMacOS, api.TargetWindows:
		return string(t), nil
	}
	return "", invalid("field %q: %s is not one of linux, macos, windows", "target", quote(string(t)))
}

// textField accepts printable UTF-8 of at most max bytes.
func textField(name, v string, max int) *apiError {
	if len(v) > max {
		return invalid("field %q is longer than %d bytes", name, max)
	}
	if !utf8.ValidString(v) || strings.ContainsFunc(v, func(r rune) bool { return r < 0x20 || r == 0x7f }) {
		return invalid("field %q contains control characters or invalid UTF-8", name)
	}
	return nil
}

func publicKeyField(v string) *apiError {
	if len(v) > maxKeyField || strings.ContainsAny(v, "\r\n") {
		return invalid("field %q must be one authorized_keys line", "sshPublicKey")
	}
	if _, _, _, _, err := ssh.ParseAuthorizedKey([]byte(v)); err != nil {
		return invalid("field %q is not an SSH public key in authorized_keys format", "sshPublicKey")
	}
	return nil
}

func hostKeyField(v string) *apiError {
	if v == "" {
		return nil
	}
	if len(v) > maxKeyField || strings.ContainsAny(v, "\r\n") {
		return invalid("field %q must be one authorized_keys line", "sshHostKey")
	}
	if _, _, _, _, err := ssh.ParseAuthorizedKey([]byte(v)); err != nil {
		return invalid("field %q is not an SSH public key in authorized_keys format", "sshHostKey")
	}
	return nil
}

func sshUserField(v string) (string, *apiError) {
	if v == "" {
		return DefaultSSHUser, nil
	}
	if !sshUserName.MatchString(v) {
		return "", invalid("field %q: %s is not a user name", "sshUser", quote(v))
	}
	return v, nil
}

func portFields(port string, fallback []string) (string, []string, *apiError) {
	if port == "" {
		port = api.DefaultSSHPort
	}
	if !validPort(port) {
		return "", nil, invalid("field %q: %s is not a port (1-65535)", "sshPort", quote(port))
	}
	if fallback == nil {
		fallback = []string{api.DefaultSSHFallback}
	}
	if len(fallback) > maxFallbackPort {
		return "", nil, invalid("field %q has more than %d ports", "sshFallbackPorts", maxFallbackPort)
	}
	for _, p := range fallback {
		if !validPort(p) {
			return "", nil, invalid("field %q: %s is not a port (1-65535)", "sshFallbackPorts", quote(p))
		}
	}
	return port, slices.Clone(fallback), nil
}

func validPort(p string) bool {
	n, err := strconv.Atoi(p)
	return err == nil && n >= 1 && n <= 65535 && strconv.Itoa(n) == p
}

// secondsField applies a duration default (for 0) and the 86400 s cap.
func secondsField(name string, v, def int) (int64, *apiError) {
	if v < 0 {
		return 0, invalid("field %q must not be negative", name)
	}
	return int64(api.ClampSeconds(v, def)), nil
}

// labelsField validates labels. Boxes the coordinator provisions get the
// ownership labels from their provider, so a create may not set them
// (reserved); a registration records whatever the direct provider set.
func labelsField(in map[string]string, reserved bool) (map[string]string, *apiError) {
	if len(in) > maxLabels {
		return nil, invalid("field %q has more than %d labels", "labels", maxLabels)
	}
	for k, v := range in {
		if reserved && ownershipLabels[k] {
			return nil, invalid("field %q: key %s is reserved for crabbox's ownership labels", "labels", quote(k))
		}
		if !labelKey.MatchString(k) {
			return nil, invalid("field %q: key %s is not a label key (lowercase letters, digits, _ . -; at most 63)", "labels", quote(k))
		}
		if !labelValue.MatchString(v) {
			return nil, invalid("field %q: value of %s is not a label value ([A-Za-z0-9_.-], at most 63)", "labels", quote(k))
		}
	}
	return maps.Clone(in), nil
}

// limitParam reads a list limit query parameter: empty, 0, negative or
// junk means def, more than max is max. Existing clients send limit=1000
// and expect a list, not an error.
func limitParam(v string, def, max int) int {
	n, err := strconv.Atoi(v)
	switch {
	case err != nil || n < 1:
		return def
	case n > max:
		return max
	}
	return n
}
