package coordinator_test

// The upstream crabbox CLI's control websocket message and the types it
// nests, transcribed field by field (names and JSON types only) from its
// public source (internal/cli/control_ws.go, coordinator.go, telemetry.go).
// Decoding every message the coordinator sends into them proves the
// upstream CLI reads ours.

type upstreamControlMessage struct {
	Type               string                  `json:"type"`
	Protocol           int                     `json:"protocol,omitempty"`
	ClientID           string                  `json:"clientID,omitempty"`
	RunID              string                  `json:"runID,omitempty"`
	Events             []upstreamRunEvent      `json:"events,omitempty"`
	NextSeq            int                     `json:"nextSeq,omitempty"`
	LeaseID            string                  `json:"leaseID,omitempty"`
	ExpectedProvider   string                  `json:"expectedProvider,omitempty"`
	OK                 bool                    `json:"ok,omitempty"`
	ExpiresAt          string                  `json:"expiresAt,omitempty"`
	Code               string                  `json:"code,omitempty"`
	Message            string                  `json:"message,omitempty"`
	Error              string                  `json:"error,omitempty"`
	IdleTimeoutSeconds int                     `json:"idleTimeoutSeconds,omitempty"`
	Telemetry          *upstreamLeaseTelemetry `json:"telemetry,omitempty"`
}

type upstreamRunEvent struct {
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

type upstreamLeaseTelemetry struct {
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
