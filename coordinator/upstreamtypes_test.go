package coordinator_test

import (
	"encoding/json"
	"fmt"
)

// The response types of the upstream crabbox CLI (github.com/openclaw/crabbox),
// transcribed field by field for the compatibility suite in
// upstream_compat_test.go and the control and sign-in tests: names, JSON
// tags and Go types only, so that our answers decode, and fail to decode,
// exactly where the upstream client's would. Unless noted they are declared in its internal/cli/coordinator.go.
// When upstream changes a type, change it here the same way.

// CoordinatorLease mirrors upstream's lease record.
type CoordinatorLease struct {
	ID                    string                         `json:"id"`
	Slug                  string                         `json:"slug,omitempty"`
	Provider              string                         `json:"provider"`
	Lifecycle             string                         `json:"lifecycle,omitempty"`
	RuntimeAdapterID      string                         `json:"runtimeAdapterID,omitempty"`
	RuntimeWorkspaceID    string                         `json:"runtimeAdapterWorkspaceID,omitempty"`
	RuntimeRegistrationID string                         `json:"runtimeAdapterRegistrationID,omitempty"`
	TargetOS              string                         `json:"target,omitempty"`
	WindowsMode           string                         `json:"windowsMode,omitempty"`
	Desktop               bool                           `json:"desktop,omitempty"`
	DesktopEnv            string                         `json:"desktopEnv,omitempty"`
	Browser               bool                           `json:"browser,omitempty"`
	Code                  bool                           `json:"code,omitempty"`
	Tailscale             *TailscaleMetadata             `json:"tailscale,omitempty"`
	Region                string                         `json:"region,omitempty"`
	Owner                 string                         `json:"owner"`
	Org                   string                         `json:"org"`
	Share                 *CoordinatorShare              `json:"share,omitempty"`
	Profile               string                         `json:"profile"`
	Class                 string                         `json:"class"`
	Pond                  string                         `json:"pond,omitempty"`
	ExposedPorts          []string                       `json:"exposedPorts,omitempty"`
	ServerType            string                         `json:"serverType"`
	RequestedServerType   string                         `json:"requestedServerType,omitempty"`
	HostID                string                         `json:"hostId,omitempty"`
	HostIDCompat          string                         `json:"hostID,omitempty"`
	Market                string                         `json:"market,omitempty"`
	ProvisioningAttempts  []ProvisioningAttempt          `json:"provisioningAttempts,omitempty"`
	Image                 *CoordinatorLeaseImage         `json:"image,omitempty"`
	ProvisioningTiming    *CoordinatorProvisioningTiming `json:"provisioningTiming,omitempty"`
	CapacityHints         []CapacityHint                 `json:"capacityHints,omitempty"`
	ServerID              int64                          `json:"serverID"`
	CloudID               string                         `json:"cloudID"`
	ServerName            string                         `json:"serverName"`
	Host                  string                         `json:"host"`
	SSHUser               string                         `json:"sshUser"`
	SSHPort               string                         `json:"sshPort"`
	SSHHostKey            string                         `json:"sshHostKey,omitempty"`
	SSHFallbackPorts      []string                       `json:"sshFallbackPorts,omitempty"`
	WorkRoot              string                         `json:"workRoot"`
	Keep                  bool                           `json:"keep"`
	State                 string                         `json:"state"`
	TTLSeconds            int                            `json:"ttlSeconds,omitempty"`
	IdleTimeoutSeconds    int                            `json:"idleTimeoutSeconds,omitempty"`
	CreatedAt             string                         `json:"createdAt,omitempty"`
	UpdatedAt             string                         `json:"updatedAt,omitempty"`
	LastTouchedAt         string                         `json:"lastTouchedAt,omitempty"`
	ExpiresAt             string                         `json:"expiresAt"`
	Telemetry             *LeaseTelemetry                `json:"telemetry,omitempty"`
	TelemetryHistory      []*LeaseTelemetry              `json:"telemetryHistory,omitempty"`
	CleanupAttempts       int                            `json:"cleanupAttempts,omitempty"`
	CleanupStartedAt      string                         `json:"cleanupStartedAt,omitempty"`
	CleanupError          string                         `json:"cleanupError,omitempty"`
	CleanupRetryAt        string                         `json:"cleanupRetryAt,omitempty"`
	ReleaseDeletesServer  *bool                          `json:"releaseDeletesServer,omitempty"`
	FailureError          string                         `json:"failureError,omitempty"`
	ProviderMetadata      map[string]any                 `json:"providerMetadata,omitempty"`
}

// CoordinatorLeaseResponse is the {"lease": ...} wrapper upstream's lease
// calls decode into (declared inline in each of its methods).
type CoordinatorLeaseResponse struct {
	Lease CoordinatorLease `json:"lease"`
}

// CoordinatorLeasesResponse is the {"leases": [...]} wrapper of upstream's
// Leases and AdminLeases.
type CoordinatorLeasesResponse struct {
	Leases []CoordinatorLease `json:"leases"`
}

// CoordinatorPoolResponse is the {"machines": [...]} wrapper of upstream's
// Pool.
type CoordinatorPoolResponse struct {
	Machines []CoordinatorMachine `json:"machines"`
}

type CoordinatorCanceledCreateAttestation struct {
	Version          int    `json:"version"`
	RequestedLeaseID string `json:"requestedLeaseID"`
	CreateAttemptID  string `json:"createAttemptID"`
	State            string `json:"state"`
}

type CoordinatorCanceledCreateResult struct {
	CanceledCreate CoordinatorCanceledCreateAttestation `json:"canceledCreate"`
	Lease          *CoordinatorLease                    `json:"lease,omitempty"`
}

type CoordinatorLeaseImage struct {
	ID         string `json:"id"`
	Source     string `json:"source"`
	Provider   string `json:"provider,omitempty"`
	Kind       string `json:"kind,omitempty"`
	Region     string `json:"region,omitempty"`
	SourceID   string `json:"sourceID,omitempty"`
	PromotedAt string `json:"promotedAt,omitempty"`
}

type CoordinatorProvisioningTiming struct {
	RequestMs      int64 `json:"requestMs"`
	NetworkReadyMs int64 `json:"networkReadyMs,omitempty"`
	BootstrapMs    int64 `json:"bootstrapMs,omitempty"`
	TotalMs        int64 `json:"totalMs"`
}

// CoordinatorLeaseRegistration is the request body of upstream's
// RegisterLease (sent, not decoded).
type CoordinatorLeaseRegistration struct {
	Slug                  string   `json:"slug,omitempty"`
	Provider              string   `json:"provider"`
	TargetOS              string   `json:"target"`
	WindowsMode           string   `json:"windowsMode,omitempty"`
	Desktop               bool     `json:"desktop,omitempty"`
	DesktopEnv            string   `json:"desktopEnv,omitempty"`
	Browser               bool     `json:"browser,omitempty"`
	Code                  bool     `json:"code,omitempty"`
	CloudID               string   `json:"cloudID,omitempty"`
	ServerID              int64    `json:"serverID,omitempty"`
	ServerName            string   `json:"serverName,omitempty"`
	ServerType            string   `json:"serverType,omitempty"`
	Host                  string   `json:"host"`
	SSHUser               string   `json:"sshUser,omitempty"`
	SSHPort               string   `json:"sshPort,omitempty"`
	SSHFallbackPorts      []string `json:"sshFallbackPorts,omitempty"`
	WorkRoot              string   `json:"workRoot,omitempty"`
	Profile               string   `json:"profile,omitempty"`
	Class                 string   `json:"class,omitempty"`
	Pond                  string   `json:"pond,omitempty"`
	ExposedPorts          []string `json:"exposedPorts,omitempty"`
	TTLSeconds            int      `json:"ttlSeconds,omitempty"`
	IdleTimeoutSeconds    int      `json:"idleTimeoutSeconds,omitempty"`
	RuntimeAdapterID      string   `json:"runtimeAdapterID,omitempty"`
	RuntimeWorkspaceID    string   `json:"runtimeAdapterWorkspaceID,omitempty"`
	RuntimeRegistrationID string   `json:"runtimeAdapterRegistrationID,omitempty"`
}

type CoordinatorShareRole string

type CoordinatorShare struct {
	Users     map[string]CoordinatorShareRole `json:"users,omitempty"`
	Org       CoordinatorShareRole            `json:"org,omitempty"`
	UpdatedAt string                          `json:"updatedAt,omitempty"`
	UpdatedBy string                          `json:"updatedBy,omitempty"`
}

type ProvisioningAttempt struct {
	Region     string `json:"region,omitempty"`
	ServerType string `json:"serverType"`
	Market     string `json:"market,omitempty"`
	Category   string `json:"category,omitempty"`
	Message    string `json:"message"`
}

type CapacityHint struct {
	Code         string   `json:"code"`
	Message      string   `json:"message"`
	Action       string   `json:"action,omitempty"`
	Region       string   `json:"region,omitempty"`
	Market       string   `json:"market,omitempty"`
	Class        string   `json:"class,omitempty"`
	ServerType   string   `json:"serverType,omitempty"`
	RegionsTried []string `json:"regionsTried,omitempty"`
}

type CoordinatorMachine struct {
	ID         CoordinatorID     `json:"id"`
	Provider   string            `json:"provider"`
	CloudID    string            `json:"cloudID"`
	Name       string            `json:"name"`
	Status     string            `json:"status"`
	ServerType string            `json:"serverType"`
	Host       string            `json:"host"`
	Labels     map[string]string `json:"labels"`
}

// CoordinatorID is upstream's machine ID type: it decodes a JSON string
// or a JSON integer, and nothing else.
type CoordinatorID string

func (id *CoordinatorID) UnmarshalJSON(b []byte) error {
	var s string
	if json.Unmarshal(b, &s) == nil {
		*id = CoordinatorID(s)
		return nil
	}
	var n int64
	if err := json.Unmarshal(b, &n); err != nil {
		return fmt.Errorf("coordinator id %s is neither a string nor an integer", b)
	}
	*id = CoordinatorID(fmt.Sprint(n))
	return nil
}

type CoordinatorUsageResponse struct {
	Usage  CoordinatorUsageSummary `json:"usage"`
	Limits CoordinatorCostLimits   `json:"limits"`
}

type CoordinatorWhoami struct {
	Owner          string `json:"owner"`
	Org            string `json:"org"`
	Auth           string `json:"auth"`
	Admin          bool   `json:"admin,omitempty"`
	TokenExpiresAt string `json:"tokenExpiresAt,omitempty"`
}

type CoordinatorProviderReadiness struct {
	Provider   string        `json:"provider"`
	Configured bool          `json:"configured"`
	Missing    []string      `json:"missing,omitempty"`
	Message    string        `json:"message,omitempty"`
	Checks     []DoctorCheck `json:"checks,omitempty"`
}

// DoctorCheck is declared in upstream's internal/cli/provider_backend.go.
type DoctorCheck struct {
	Status  string            `json:"status"`
	Check   string            `json:"check"`
	Message string            `json:"message,omitempty"`
	Details map[string]string `json:"details,omitempty"`
}

type CoordinatorRunsResponse struct {
	Runs []CoordinatorRun `json:"runs"`
}

type CoordinatorRunResponse struct {
	Run CoordinatorRun `json:"run"`
}

type CoordinatorRunLeaseOwner struct {
	Owner string `json:"owner"`
	Org   string `json:"org"`
}

type CoordinatorRun struct {
	ID           string                     `json:"id"`
	LeaseID      string                     `json:"leaseID"`
	LeaseIDs     []string                   `json:"leaseIDs,omitempty"`
	Slug         string                     `json:"slug,omitempty"`
	Owner        string                     `json:"owner"`
	Org          string                     `json:"org"`
	LeaseOwners  []CoordinatorRunLeaseOwner `json:"leaseOwners,omitempty"`
	Provider     string                     `json:"provider"`
	TargetOS     string                     `json:"target,omitempty"`
	WindowsMode  string                     `json:"windowsMode,omitempty"`
	Class        string                     `json:"class"`
	ServerType   string                     `json:"serverType"`
	Command      []string                   `json:"command"`
	Label        string                     `json:"label,omitempty"`
	State        string                     `json:"state"`
	Phase        string                     `json:"phase,omitempty"`
	ExitCode     *int                       `json:"exitCode,omitempty"`
	SyncMs       int64                      `json:"syncMs,omitempty"`
	CommandMs    int64                      `json:"commandMs,omitempty"`
	DurationMs   int64                      `json:"durationMs,omitempty"`
	LogBytes     int64                      `json:"logBytes"`
	LogTruncated bool                       `json:"logTruncated"`
	BlockedStage string                     `json:"blockedStage,omitempty"`
	RetryLikely  string                     `json:"retryLikely,omitempty"`
	Results      *TestResultSummary         `json:"results,omitempty"`
	Telemetry    *RunTelemetrySummary       `json:"telemetry,omitempty"`
	StartedAt    string                     `json:"startedAt"`
	LastEventAt  string                     `json:"lastEventAt,omitempty"`
	EventCount   int                        `json:"eventCount,omitempty"`
	EndedAt      string                     `json:"endedAt,omitempty"`
}

type CoordinatorRunEventsResponse struct {
	Events []CoordinatorRunEvent `json:"events"`
}

type CoordinatorRunEventResponse struct {
	Event CoordinatorRunEvent `json:"event"`
}

type CoordinatorRunEvent struct {
	RunID       string `json:"runID"`
	Seq         int    `json:"seq"`
	Type        string `json:"type"`
	Phase       string `json:"phase,omitempty"`
	Stream      string `json:"stream,omitempty"`
	Message     string `json:"message,omitempty"`
	Data        string `json:"data,omitempty"`
	LeaseID     string `json:"leaseID,omitempty"`
	Slug        string `json:"slug,omitempty"`
	Provider    string `json:"provider,omitempty"`
	TargetOS    string `json:"target,omitempty"`
	WindowsMode string `json:"windowsMode,omitempty"`
	Class       string `json:"class,omitempty"`
	ServerType  string `json:"serverType,omitempty"`
	ExitCode    *int   `json:"exitCode,omitempty"`
	CreatedAt   string `json:"createdAt"`
}

// CoordinatorRunEventInput is the request body of upstream's
// AppendRunEvent (sent, not decoded).
type CoordinatorRunEventInput struct {
	Type        string `json:"type,omitempty"`
	Phase       string `json:"phase,omitempty"`
	Stream      string `json:"stream,omitempty"`
	Message     string `json:"message,omitempty"`
	Data        string `json:"data,omitempty"`
	LeaseID     string `json:"leaseID,omitempty"`
	Slug        string `json:"slug,omitempty"`
	Provider    string `json:"provider,omitempty"`
	TargetOS    string `json:"target,omitempty"`
	WindowsMode string `json:"windowsMode,omitempty"`
	Class       string `json:"class,omitempty"`
	ServerType  string `json:"serverType,omitempty"`
	ExitCode    *int   `json:"exitCode,omitempty"`
}

type TestResultSummary struct {
	Format      string        `json:"format"`
	Files       []string      `json:"files"`
	Suites      int           `json:"suites"`
	Tests       int           `json:"tests"`
	Failures    int           `json:"failures"`
	Errors      int           `json:"errors"`
	Skipped     int           `json:"skipped"`
	TimeSeconds float64       `json:"timeSeconds"`
	Failed      []TestFailure `json:"failed"`
}

type TestFailure struct {
	Suite     string `json:"suite"`
	Name      string `json:"name"`
	Classname string `json:"classname,omitempty"`
	File      string `json:"file,omitempty"`
	Message   string `json:"message,omitempty"`
	Type      string `json:"type,omitempty"`
	Kind      string `json:"kind"`
}

type CoordinatorUsageSummary struct {
	Month          string                  `json:"month"`
	Scope          string                  `json:"scope"`
	Owner          string                  `json:"owner,omitempty"`
	Org            string                  `json:"org,omitempty"`
	Leases         int                     `json:"leases"`
	ActiveLeases   int                     `json:"activeLeases"`
	RuntimeSeconds int64                   `json:"runtimeSeconds"`
	EstimatedUSD   float64                 `json:"estimatedUSD"`
	ReservedUSD    float64                 `json:"reservedUSD"`
	ByOwner        []CoordinatorUsageGroup `json:"byOwner"`
	ByOrg          []CoordinatorUsageGroup `json:"byOrg"`
	ByProvider     []CoordinatorUsageGroup `json:"byProvider"`
	ByServerType   []CoordinatorUsageGroup `json:"byServerType"`
}

type CoordinatorUsageGroup struct {
	Key            string  `json:"key"`
	Leases         int     `json:"leases"`
	ActiveLeases   int     `json:"activeLeases"`
	RuntimeSeconds int64   `json:"runtimeSeconds"`
	EstimatedUSD   float64 `json:"estimatedUSD"`
	ReservedUSD    float64 `json:"reservedUSD"`
}

type CoordinatorCostLimits struct {
	MaxActiveLeases                 int      `json:"maxActiveLeases"`
	MaxActiveLeasesPerOwner         int      `json:"maxActiveLeasesPerOwner"`
	MaxActiveLeasesPerOrg           int      `json:"maxActiveLeasesPerOrg"`
	CapacityAdminOwners             []string `json:"capacityAdminOwners,omitempty"`
	MaxActiveLeasesPerCapacityAdmin int      `json:"maxActiveLeasesPerCapacityAdmin,omitempty"`
	MaxMonthlyUSD                   float64  `json:"maxMonthlyUSD"`
	MaxMonthlyUSDPerOwner           float64  `json:"maxMonthlyUSDPerOwner"`
	MaxMonthlyUSDPerOrg             float64  `json:"maxMonthlyUSDPerOrg"`
}

// TailscaleMetadata is declared in upstream's internal/cli/network.go.
type TailscaleMetadata struct {
	Enabled                bool     `json:"enabled"`
	Hostname               string   `json:"hostname,omitempty"`
	FQDN                   string   `json:"fqdn,omitempty"`
	IPv4                   string   `json:"ipv4,omitempty"`
	Tags                   []string `json:"tags,omitempty"`
	State                  string   `json:"state,omitempty"`
	Error                  string   `json:"error,omitempty"`
	Version                string   `json:"version,omitempty"`
	DeviceID               string   `json:"deviceID,omitempty"`
	ExitNode               string   `json:"exitNode,omitempty"`
	ExitNodeAllowLANAccess bool     `json:"exitNodeAllowLanAccess,omitempty"`
}

// LeaseTelemetry and RunTelemetrySummary are declared in upstream's
// internal/cli/telemetry.go.
type LeaseTelemetry struct {
	CapturedAt       string   `json:"capturedAt,omitempty"`
	Source           string   `json:"source,omitempty"`
	Load1            *float64 `json:"load1,omitempty"`
	Load5            *float64 `json:"load5,omitempty"`
	Load15           *float64 `json:"load15,omitempty"`
	CPUCount         *int64   `json:"cpuCount,omitempty"`
	MemoryUsedBytes  *int64   `json:"memoryUsedBytes,omitempty"`
	MemoryTotalBytes *int64   `json:"memoryTotalBytes,omitempty"`
	MemoryPercent    *float64 `json:"memoryPercent,omitempty"`
	DiskUsedBytes    *int64   `json:"diskUsedBytes,omitempty"`
	DiskTotalBytes   *int64   `json:"diskTotalBytes,omitempty"`
	DiskPercent      *float64 `json:"diskPercent,omitempty"`
	UptimeSeconds    *int64   `json:"uptimeSeconds,omitempty"`
}

type RunTelemetrySummary struct {
	Start   *LeaseTelemetry   `json:"start,omitempty"`
	End     *LeaseTelemetry   `json:"end,omitempty"`
	Samples []*LeaseTelemetry `json:"samples,omitempty"`
}

// CoordinatorControlMessage mirrors upstream's coordinatorControlMessage,
// every message either way on the control websocket (declared in its
// internal/cli/control_ws.go).
type CoordinatorControlMessage struct {
	Type               string                `json:"type"`
	Protocol           int                   `json:"protocol,omitempty"`
	ClientID           string                `json:"clientID,omitempty"`
	RunID              string                `json:"runID,omitempty"`
	Events             []CoordinatorRunEvent `json:"events,omitempty"`
	NextSeq            int                   `json:"nextSeq,omitempty"`
	LeaseID            string                `json:"leaseID,omitempty"`
	ExpectedProvider   string                `json:"expectedProvider,omitempty"`
	OK                 bool                  `json:"ok,omitempty"`
	ExpiresAt          string                `json:"expiresAt,omitempty"`
	Code               string                `json:"code,omitempty"`
	Message            string                `json:"message,omitempty"`
	Error              string                `json:"error,omitempty"`
	IdleTimeoutSeconds int                   `json:"idleTimeoutSeconds,omitempty"`
	Telemetry          *LeaseTelemetry       `json:"telemetry,omitempty"`
}

// CoordinatorGitHubLoginStart and CoordinatorGitHubLoginPoll are the
// answers of upstream's browser sign-in (its requests are maps).
type CoordinatorGitHubLoginStart struct {
	LoginID   string `json:"loginID"`
	URL       string `json:"url"`
	ExpiresAt string `json:"expiresAt"`
}

type CoordinatorGitHubLoginPoll struct {
	Status         string `json:"status"`
	Token          string `json:"token,omitempty"`
	Owner          string `json:"owner,omitempty"`
	Org            string `json:"org,omitempty"`
	Login          string `json:"login,omitempty"`
	Provider       string `json:"provider,omitempty"`
	TokenExpiresAt string `json:"tokenExpiresAt,omitempty"`
	Error          string `json:"error,omitempty"`
}
