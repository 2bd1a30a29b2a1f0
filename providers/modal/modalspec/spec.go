// Package modalspec describes the Modal Sandboxes provider without
// Modal's Go SDK (which links gRPC): its name, environment variables,
// option defaults and provider.Spec. The provider package
// (providers/modal) uses this Spec, and so can the crabbox command, which
// serves the provider through the separate program crabbox-provider-modal
// and must not link gRPC to know the provider's flags.
package modalspec

import (
	"time"

	"github.com/crabbox-dev/crabbox/provider"
)

// Name is the provider's registered name.
const Name = "modal"

// Environment variables the provider (through Modal's SDK) reads.
const (
	TokenIDEnv     = "MODAL_TOKEN_ID"
	TokenSecretEnv = "MODAL_TOKEN_SECRET"
	// EndpointEnv is the endpoint option's variable (CRABBOX_ + its flag).
	EndpointEnv = "CRABBOX_MODAL_ENDPOINT"
)

// Defaults of the provider's options.
const (
	DefaultApp     = "crabbox"
	DefaultImage   = "debian:bookworm-slim"
	DefaultWorkdir = "/root/crabbox"
	// DefaultMaxLifetime is the longest Modal lets a sandbox live: its
	// timeout may be at most 24 hours (modal.com/docs/guide/sandbox).
	DefaultMaxLifetime = "24h"
)

// MaxTimeout is Modal's own cap on a sandbox's timeout.
const MaxTimeout = 24 * time.Hour

var spec = provider.Spec{
	Name: Name,
	Description: "a Modal Sandbox (modal.com) per lease, through Modal's Go SDK; " +
		"commands and files through the sandbox's exec API",
	Kind:        provider.KindDelegatedRun,
	Targets:     []provider.Target{provider.TargetLinux},
	Features:    []provider.Feature{provider.FeatureFiles, provider.FeatureSelfExpiry, provider.FeatureCleanup, provider.FeatureDoctor},
	Coordinator: provider.CoordinatorUnsupported,
	Options: []provider.Option{
		{Name: "endpoint", Flag: "modal-endpoint", Locates: true,
			Help: "Modal API endpoint, a server URL (default: MODAL_SERVER_URL, ~/.modal.toml's server_url, or https://api.modal.com)"},
		{Name: "environment", Flag: "modal-environment", Locates: true,
			Help: "Modal environment (default: MODAL_ENVIRONMENT or the profile's)"},
		{Name: "app", Flag: "modal-app", Default: DefaultApp, Locates: true,
			Help: "Modal app the sandboxes belong to (created when missing)"},
		{Name: "image", Flag: "modal-image", Default: DefaultImage,
			Help: "container registry image of the sandboxes (needs sh, cat, mkdir, chmod, kill)"},
		{Name: "workdir", Flag: "modal-workdir", Default: DefaultWorkdir, Locates: true,
			Help: "absolute directory in the sandbox under which checkouts are kept"},
		{Name: "max-lifetime", Flag: "modal-max-lifetime", Default: DefaultMaxLifetime,
			Help: "longest a sandbox may live (Modal's maximum: 24h); a longer lease TTL is capped to it"},
		{Name: "owner", Flag: "modal-owner", Locates: true,
			Help: "owner tag of crabbox's sandboxes; list and cleanup see only this owner's (default: the OS user)"},
	},
	LifetimeOption: "max-lifetime",
	LifetimePlans:  map[string]time.Duration{"modal": MaxTimeout},
	Credentials: []provider.Credential{
		{Env: []string{TokenIDEnv}, Elsewhere: "~/.modal.toml (modal token new)"},
		{Env: []string{TokenSecretEnv}, Elsewhere: "~/.modal.toml (modal token new)"},
	},
}

// Spec describes the provider. Each call returns a fresh copy.
func Spec() provider.Spec { return spec.Clone() }
