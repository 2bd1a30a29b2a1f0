// Package azuredynamicsessionsspec describes the Azure Container Apps
// dynamic sessions provider without the Azure SDK: its name, environment
// variables, option defaults and provider.Spec. The provider package
// (providers/azuredynamicsessions) uses this Spec, and so can the crabbox
// command, which serves the provider through the separate program
// crabbox-provider-azure-dynamic-sessions and must not link the SDK to
// know the provider's flags.
package azuredynamicsessionsspec

import "github.com/crabbox-dev/crabbox/provider"

// Name is the provider's registered name.
const Name = "azure-dynamic-sessions"

// Environment variables the provider reads.
const (
	// EndpointEnv is the pool management endpoint (the endpoint option's
	// variable, as for every option: CRABBOX_ + its flag).
	EndpointEnv = "CRABBOX_AZURE_DYNAMIC_SESSIONS_ENDPOINT"
	// TokenEnv, when set, is a bearer token for the
	// https://dynamicsessions.io audience, used instead of azidentity's
	// default credential chain. It is read from the environment only.
	TokenEnv = "CRABBOX_AZURE_DYNAMIC_SESSIONS_TOKEN"
)

// Defaults of the provider's options.
const (
	// DefaultAPIVersion is the data-plane API version the provider speaks
	// (the newest published in azure-rest-api-specs,
	// specification/app/data-plane/Microsoft.App.DynamicSessions).
	DefaultAPIVersion = "2025-10-02-preview"
	// DefaultWorkdir is under /mnt/data, the directory a session's file
	// API serves.
	DefaultWorkdir = "/mnt/data/crabbox"
)

var spec = provider.Spec{
	Name: Name,
	Description: "a session of an Azure Container Apps dynamic session pool (container type Shell) per lease; " +
		"commands and files through the pool management API (Entra ID token from azidentity's default chain)",
	Kind:        provider.KindDelegatedRun,
	Targets:     []provider.Target{provider.TargetLinux},
	Features:    []provider.Feature{provider.FeatureFiles, provider.FeatureSelfExpiry, provider.FeatureCleanup, provider.FeatureDoctor},
	Coordinator: provider.CoordinatorUnsupported,
	Options: []provider.Option{
		{Name: "endpoint", Flag: "azure-dynamic-sessions-endpoint", Locates: true,
			Help: "pool management endpoint of a Shell session pool (az containerapp sessionpool show --query properties.poolManagementEndpoint); required"},
		{Name: "api-version", Flag: "azure-dynamic-sessions-api-version", Default: DefaultAPIVersion,
			Help: "data-plane api-version sent with every request"},
		{Name: "workdir", Flag: "azure-dynamic-sessions-workdir", Default: DefaultWorkdir, Locates: true,
			Help: "absolute directory in the session under which checkouts are kept"},
		{Name: "owner", Flag: "azure-dynamic-sessions-owner", Locates: true,
			Help: "owner part of crabbox's session identifiers; list and cleanup see only this owner's sessions (default: the OS user)"},
	},
	Credentials: []provider.Credential{{
		Env:       []string{TokenEnv, "AZURE_CLIENT_ID"},
		Elsewhere: "az login or a managed identity",
	}},
}

// Spec describes the provider. Each call returns a fresh copy.
func Spec() provider.Spec { return spec.Clone() }
