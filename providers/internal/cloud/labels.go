package cloud

import (
	"crypto/ed25519"
	"encoding/base32"
	"errors"
	"fmt"
	"maps"
	"strconv"
	"strings"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/crabbox-dev/crabbox/lease"
	"github.com/crabbox-dev/crabbox/provider"
)

// Keys of the ownership labels every crabbox cloud resource carries.
const (
	LabelCrabbox         = "crabbox"    // always "true"
	LabelCreatedBy       = "created_by" // always "crabbox"
	LabelProvider        = "provider"
	LabelLease           = "lease"
	LabelSlug            = "slug"
	LabelOwner           = "owner"
	LabelClass           = "class"
	LabelServerType      = "server_type"
	LabelTarget          = "target"
	LabelKeep            = "keep"
	LabelState           = "state"
	LabelCreatedAt       = "created_at"      // Unix seconds
	LabelLastTouchedAt   = "last_touched_at" // Unix seconds
	LabelExpiresAt       = "expires_at"      // Unix seconds
	LabelIdleTimeoutSecs = "idle_timeout_secs"
	LabelTTLSecs         = "ttl_secs"
	// LabelHostKey is the box's ed25519 host public key (HostKeyLabel), so
	// Resolve and List return the pinned key without local state.
	LabelHostKey = "host_key"
	// LabelSSHPort is the port the box answered SSH on (WithSSHPort).
	LabelSSHPort = "ssh_port"
)

// reserved are the ownership label keys; caller labels may not use them.
var reserved = map[string]bool{
	LabelCrabbox: true, LabelCreatedBy: true, LabelProvider: true, LabelLease: true,
	LabelSlug: true, LabelOwner: true, LabelClass: true, LabelServerType: true,
	LabelTarget: true, LabelKeep: true, LabelState: true, LabelCreatedAt: true,
	LabelLastTouchedAt: true, LabelExpiresAt: true, LabelIdleTimeoutSecs: true,
	LabelTTLSecs: true, LabelHostKey: true, LabelSSHPort: true,
}

// IsOwnershipKey reports whether key is one of the ownership label keys.
func IsOwnershipKey(key string) bool { return reserved[key] }

// Box states: the values of the state label.
const (
	StateProvisioning = "provisioning"
	StateReady        = "ready"
	StateRunning      = "running"
	StateReleased     = "released"
	StateFailed       = "failed"
)

// MaxLabelLength is the longest label key or value clouds accept.
const MaxLabelLength = 63

// LabelOptions are the parts of the ownership labels that the acquire
// request does not carry.
type LabelOptions struct {
	// Provider is the provider's canonical name. Required.
	Provider string
	// ServerType is the cloud's machine type, e.g. "cx22" or "t3.small".
	ServerType string
	// Owner is who asked for the box (a user or account name); it is
	// sanitised like every value.
	Owner string
	// Class is the size class the caller asked for, if any.
	Class string
	// Target is the box's operating system; empty means linux.
	Target provider.Target
	// State is the box's state; empty means StateProvisioning.
	State string
	// HostKey, if set, is recorded in the host_key label (it must be an
	// ed25519 key, as NewHostKey makes).
	HostKey ssh.PublicKey
}

// NewLabels returns the ownership labels of the box acquired by req, plus
// the caller's labels from req.Labels. It fails, naming the problem, when
// req lacks an identity or expiry, or a caller label has an invalid key or
// one of the ownership keys.
func NewLabels(req provider.AcquireRequest, o LabelOptions) (map[string]string, error) {
	switch {
	case !lease.IsID(req.LeaseID):
		return nil, fmt.Errorf("labels: lease ID %q is not a crabbox lease ID (cbx_ and 12 hex digits)", req.LeaseID)
	case o.Provider == "":
		return nil, errors.New("labels: no provider name")
	case req.CreatedAt.IsZero():
		return nil, fmt.Errorf("labels of lease %s: no creation time", req.LeaseID)
	case req.ExpiresAt.IsZero():
		return nil, fmt.Errorf("labels of lease %s: no expiry", req.LeaseID)
	case req.TTL < 0 || req.IdleTimeout < 0:
		return nil, fmt.Errorf("labels of lease %s: negative TTL %s or idle timeout %s", req.LeaseID, req.TTL, req.IdleTimeout)
	}
	out := make(map[string]string, len(reserved)+len(req.Labels))
	for k, v := range req.Labels {
		if reserved[k] {
			return nil, fmt.Errorf("labels of lease %s: label %q is reserved for crabbox's ownership labels", req.LeaseID, k)
		}
		if err := CheckKey(k); err != nil {
			return nil, fmt.Errorf("labels of lease %s: %w", req.LeaseID, err)
		}
		out[k] = SanitizeValue(v)
	}
	target, state := o.Target, o.State
	if target == "" {
		target = provider.TargetLinux
	}
	if state == "" {
		state = StateProvisioning
	}
	set := func(k, v string) {
		if v = SanitizeValue(v); v != "" {
			out[k] = v
		}
	}
	set(LabelCrabbox, "true")
	set(LabelCreatedBy, "crabbox")
	set(LabelProvider, o.Provider)
	set(LabelLease, req.LeaseID)
	set(LabelSlug, req.Slug)
	set(LabelOwner, o.Owner)
	set(LabelClass, o.Class)
	set(LabelServerType, o.ServerType)
	set(LabelTarget, string(target))
	set(LabelKeep, strconv.FormatBool(req.Keep))
	set(LabelState, state)
	set(LabelCreatedAt, unix(req.CreatedAt))
	set(LabelLastTouchedAt, unix(req.CreatedAt))
	set(LabelExpiresAt, unix(req.ExpiresAt))
	set(LabelIdleTimeoutSecs, strconv.FormatInt(int64(req.IdleTimeout/time.Second), 10))
	set(LabelTTLSecs, strconv.FormatInt(int64(req.TTL/time.Second), 10))
	if o.HostKey != nil {
		v, err := HostKeyLabel(o.HostKey)
		if err != nil {
			return nil, fmt.Errorf("labels of lease %s: %w", req.LeaseID, err)
		}
		out[LabelHostKey] = v
	}
	return out, nil
}

func unix(t time.Time) string { return strconv.FormatInt(t.Unix(), 10) }

// CheckKey reports whether key is a usable label key: 1 to 63 characters of
// [A-Za-z0-9_.-], starting and ending with a letter or digit.
func CheckKey(key string) error {
	if key == "" || len(key) > MaxLabelLength {
		return fmt.Errorf("label key %q: must be 1 to %d characters", key, MaxLabelLength)
	}
	for i := 0; i < len(key); i++ {
		if !labelChar(key[i]) {
			return fmt.Errorf("label key %q: character %q is not allowed (use A-Z, a-z, 0-9, '_', '.', '-')", key, key[i])
		}
	}
	if !alnum(key[0]) || !alnum(key[len(key)-1]) {
		return fmt.Errorf("label key %q: must start and end with a letter or digit", key)
	}
	return nil
}

// SanitizeValue makes v a valid label value: every character outside
// [A-Za-z0-9_.-] becomes '_', the result is cut to 63 characters, and
// leading and trailing characters that are not letters or digits are
// dropped (clouds such as Hetzner reject them). The result may be empty.
func SanitizeValue(v string) string {
	out := make([]byte, 0, min(len(v), MaxLabelLength))
	for _, r := range v {
		if r < 0x80 && labelChar(byte(r)) {
			out = append(out, byte(r))
		} else {
			out = append(out, '_')
		}
		if len(out) == MaxLabelLength {
			break
		}
	}
	return strings.TrimFunc(string(out), func(r rune) bool { return r >= 0x80 || !alnum(byte(r)) })
}

// GCPLabels returns labels in the form Google Cloud accepts: keys and
// values lowercase, with every character outside [a-z0-9_-] replaced by
// '_', and keys that do not start with a letter prefixed with "x". The
// ownership labels keep their meaning (ParseLabels reads them back); only
// free-form values such as the owner lose their case.
func GCPLabels(labels map[string]string) map[string]string {
	out := make(map[string]string, len(labels))
	for k, v := range labels {
		k = gcpValue(k)
		if k == "" || k[0] < 'a' || k[0] > 'z' {
			k = "x" + k
		}
		out[k[:min(len(k), MaxLabelLength)]] = gcpValue(v)
	}
	return out
}

func gcpValue(v string) string {
	out := []byte(strings.ToLower(v))
	for i, c := range out {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			out[i] = '_'
		}
	}
	return string(out[:min(len(out), MaxLabelLength)])
}

func labelChar(c byte) bool { return alnum(c) || c == '_' || c == '.' || c == '-' }

func alnum(c byte) bool { return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' }

// Ownership returns the labels that select every crabbox resource of the
// provider, and with a lease ID the resources of that one lease. Providers
// turn them into their cloud's label selector or tag filter.
func Ownership(providerName, leaseID string) map[string]string {
	m := map[string]string{LabelCrabbox: "true", LabelProvider: providerName}
	if leaseID != "" {
		m[LabelLease] = leaseID
	}
	return m
}

// Info is what a box's ownership labels say about it.
type Info struct {
	LeaseID    string
	Slug       string
	Provider   string
	Owner      string
	Class      string
	ServerType string
	// OS is the target label: the box's operating system.
	OS            string
	State         string
	Keep          bool
	CreatedAt     time.Time
	LastTouchedAt time.Time
	ExpiresAt     time.Time
	TTL           time.Duration
	IdleTimeout   time.Duration
	// HostKey is the host key label in authorized_keys form; empty when
	// there is none.
	HostKey string
	// SSHPort is the ssh_port label; 0 when there is none.
	SSHPort int
	// Labels are all the box's labels, ownership and caller labels alike.
	Labels map[string]string
}

// ParseLabels reads a box's ownership labels. It fails, naming the label,
// when the box is not a crabbox box (no crabbox=true), has no valid lease ID
// or provider, or a timestamp or duration label is not a number.
func ParseLabels(labels map[string]string) (Info, error) {
	if labels[LabelCrabbox] != "true" {
		return Info{}, fmt.Errorf("labels: no %s=true: not a crabbox box", LabelCrabbox)
	}
	info := Info{
		LeaseID: labels[LabelLease], Slug: labels[LabelSlug], Provider: labels[LabelProvider],
		Owner: labels[LabelOwner], Class: labels[LabelClass], ServerType: labels[LabelServerType],
		OS: labels[LabelTarget], State: labels[LabelState], Labels: maps.Clone(labels),
	}
	if !lease.IsID(info.LeaseID) {
		return Info{}, fmt.Errorf("labels: %s=%q is not a crabbox lease ID", LabelLease, info.LeaseID)
	}
	if info.Provider == "" {
		return Info{}, fmt.Errorf("labels of lease %s: no %s label", info.LeaseID, LabelProvider)
	}
	if k, ok := labels[LabelKeep]; ok {
		keep, err := strconv.ParseBool(k)
		if err != nil {
			return Info{}, fmt.Errorf("labels of lease %s: %s=%q is not a boolean", info.LeaseID, LabelKeep, k)
		}
		info.Keep = keep
	}
	for _, f := range []struct {
		key string
		t   *time.Time
	}{{LabelCreatedAt, &info.CreatedAt}, {LabelLastTouchedAt, &info.LastTouchedAt}, {LabelExpiresAt, &info.ExpiresAt}} {
		n, ok, err := number(labels, f.key)
		if err != nil {
			return Info{}, fmt.Errorf("labels of lease %s: %w", info.LeaseID, err)
		}
		if ok {
			*f.t = time.Unix(n, 0).UTC()
		}
	}
	for _, f := range []struct {
		key string
		d   *time.Duration
	}{{LabelTTLSecs, &info.TTL}, {LabelIdleTimeoutSecs, &info.IdleTimeout}} {
		n, ok, err := number(labels, f.key)
		if err != nil {
			return Info{}, fmt.Errorf("labels of lease %s: %w", info.LeaseID, err)
		}
		if ok {
			*f.d = time.Duration(n) * time.Second
		}
	}
	if v, ok := labels[LabelHostKey]; ok {
		k, err := ParseHostKeyLabel(v)
		if err != nil {
			return Info{}, fmt.Errorf("labels of lease %s: %w", info.LeaseID, err)
		}
		info.HostKey = strings.TrimSpace(string(ssh.MarshalAuthorizedKey(k)))
	}
	if v, ok := labels[LabelSSHPort]; ok {
		p, err := strconv.Atoi(v)
		if err != nil || p <= 0 || p > 65535 {
			return Info{}, fmt.Errorf("labels of lease %s: %s=%q is not a TCP port", info.LeaseID, LabelSSHPort, v)
		}
		info.SSHPort = p
	}
	return info, nil
}

// hostKeyEncoding fits a raw 32-byte ed25519 key into 52 characters of
// [A-Z2-7], a valid label value everywhere.
var hostKeyEncoding = base32.StdEncoding.WithPadding(base32.NoPadding)

// HostKeyLabel encodes an ed25519 host public key as a label value: the
// raw key in unpadded base32 (52 characters).
func HostKeyLabel(k ssh.PublicKey) (string, error) {
	ck, ok := k.(ssh.CryptoPublicKey)
	if !ok {
		return "", fmt.Errorf("host key label: %s key, want %s", k.Type(), ssh.KeyAlgoED25519)
	}
	raw, ok := ck.CryptoPublicKey().(ed25519.PublicKey)
	if !ok {
		return "", fmt.Errorf("host key label: %s key, want %s", k.Type(), ssh.KeyAlgoED25519)
	}
	return hostKeyEncoding.EncodeToString(raw), nil
}

// ParseHostKeyLabel decodes a host_key label value (upper- or lowercase).
func ParseHostKeyLabel(v string) (ssh.PublicKey, error) {
	raw, err := hostKeyEncoding.DecodeString(strings.ToUpper(v))
	if err != nil || len(raw) != ed25519.PublicKeySize {
		return nil, fmt.Errorf("%s=%q is not an encoded ed25519 key", LabelHostKey, v)
	}
	return ssh.NewPublicKey(ed25519.PublicKey(raw))
}

// number parses the non-negative integer label key; ok is false when it is
// absent.
func number(labels map[string]string, key string) (n int64, ok bool, err error) {
	v, ok := labels[key]
	if !ok {
		return 0, false, nil
	}
	n, err = strconv.ParseInt(v, 10, 64)
	if err != nil || n < 0 || n > 1<<40 {
		return 0, false, fmt.Errorf("%s=%q is not a number of seconds", key, v)
	}
	return n, true, nil
}

// Apply copies the lease fields of the labels into t: lease ID, slug,
// provider, state, creation and expiry times and the labels themselves,
// and the host key and SSH port when the labels have them.
func (i Info) Apply(t *provider.LeaseTarget) {
	t.LeaseID, t.Slug, t.Provider, t.State = i.LeaseID, i.Slug, i.Provider, i.State
	t.CreatedAt, t.ExpiresAt = i.CreatedAt, i.ExpiresAt
	t.Labels = maps.Clone(i.Labels)
	if i.HostKey != "" {
		t.HostKey = i.HostKey
	}
	if i.SSHPort != 0 {
		t.Port = i.SSHPort
	}
}

// Touch returns a copy of labels recording activity at now and the new
// expiry.
func Touch(labels map[string]string, now, expires time.Time) map[string]string {
	out := maps.Clone(labels)
	if out == nil {
		out = map[string]string{}
	}
	out[LabelLastTouchedAt] = unix(now)
	out[LabelExpiresAt] = unix(expires)
	return out
}

// WithSSHPort returns a copy of labels recording the port the box
// answered SSH on.
func WithSSHPort(labels map[string]string, port int) map[string]string {
	out := maps.Clone(labels)
	if out == nil {
		out = map[string]string{}
	}
	out[LabelSSHPort] = strconv.Itoa(port)
	return out
}

// WithState returns a copy of labels with the state label set to state.
func WithState(labels map[string]string, state string) map[string]string {
	out := maps.Clone(labels)
	if out == nil {
		out = map[string]string{}
	}
	out[LabelState] = state
	return out
}
