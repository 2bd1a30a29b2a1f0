package sqldb

import (
	"database/sql"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/crabbox-dev/crabbox/coordinator/store"
)

// leaseWriteColumns are the leases table's columns that inserts and
// updates write, in the order leaseArgs uses.
var leaseWriteColumns = []string{
	"id", "slug", "provider", "lifecycle", "state", "owner", "org",
	"target", "class", "server_type", "cloud_id", "server_name", "host",
	"ssh_user", "ssh_port", "ssh_fallback_ports", "ssh_host_key", "work_root", "keep",
	"ttl_seconds", "idle_timeout_seconds",
	"created_at", "updated_at", "last_touched_at", "expires_at", "released_at", "ended_at",
	"estimated_hourly_usd", "max_estimated_usd",
	"cleanup_attempts", "cleanup_error", "cleanup_started_at", "cleanup_retry_at",
	"release_deletes_server", "failure_error", "labels", "server_kept", "telemetry", "telemetry_at", "image", "location",
	"pool", "pool_taken_at",
	"create_attempt_id", "request_hash", "cleanup_token", "cleanup_claim_until",
	"pool_reserve_token", "pool_reserve_until",
}

// leaseColumns are the columns every lease read returns, in the order
// scanLease uses: the written ones, then the share, which only
// SetLeaseShare writes (with its grants), so no other update of a lease
// can lose a share changed meanwhile.
var leaseColumns = append(slices.Clip(leaseWriteColumns), "share")

var (
	leaseSelect = "SELECT " + strings.Join(leaseColumns, ", ") + " FROM leases"
	leaseInsert = func() string {
		ph := make([]string, len(leaseWriteColumns))
		for i := range ph {
			ph[i] = fmt.Sprintf("$%d", i+1)
		}
		return "INSERT INTO leases (" + strings.Join(leaseWriteColumns, ", ") + ") VALUES (" + strings.Join(ph, ", ") + ")"
	}()
	leaseUpdate = func() string {
		set := make([]string, 0, len(leaseWriteColumns)-1)
		for i, c := range leaseWriteColumns[1:] {
			set = append(set, fmt.Sprintf("%s = $%d", c, i+2))
		}
		return "UPDATE leases SET " + strings.Join(set, ", ") + " WHERE id = $1"
	}()
)

// row is a stored lease plus the columns the store keeps to itself.
type row struct {
	store.Lease
	claimUntil sql.NullInt64
	// reserveToken and reserveUntil are the reservation a take holds on
	// an idle pool box (ReservePoolLease): its fencing token and when it
	// lapses.
	reserveToken string
	reserveUntil sql.NullInt64
}

func leaseArgs(r row) ([]any, error) {
	l := r.Lease
	ports, err := json.Marshal(nonNil(l.SSHFallbackPorts))
	if err != nil {
		return nil, err
	}
	labels := l.Labels
	if labels == nil {
		labels = map[string]string{}
	}
	lab, err := json.Marshal(labels)
	if err != nil {
		return nil, err
	}
	return []any{
		l.ID, l.Slug, l.Provider, string(l.Lifecycle), string(l.State), l.Owner, l.Org,
		l.Target, l.Class, l.ServerType, l.CloudID, l.ServerName, l.Host,
		l.SSHUser, l.SSHPort, string(ports), l.SSHHostKey, l.WorkRoot, l.Keep,
		l.TTLSeconds, l.IdleTimeoutSeconds,
		ts(l.CreatedAt), ts(l.UpdatedAt), ts(l.LastTouchedAt), ts(l.ExpiresAt), ts(l.ReleasedAt), ts(l.EndedAt),
		l.EstimatedHourlyUSD, l.MaxEstimatedUSD,
		l.CleanupAttempts, l.CleanupError, ts(l.CleanupStartedAt), ts(l.CleanupRetryAt),
		l.ReleaseDeletesServer, l.FailureError, string(lab), l.ServerKept, string(l.Telemetry), ts(l.TelemetryAt), imageColumn(l.Image, l.ImageSource), l.Location,
		l.Pool, ts(l.PoolTakenAt),
		l.CreateAttemptID, l.RequestHash, l.CleanupToken, r.claimUntil,
		r.reserveToken, r.reserveUntil,
	}, nil
}

type scanner interface{ Scan(dest ...any) error }

func scanLease(sc scanner) (row, error) {
	var (
		r                                                   row
		l                                                   = &r.Lease
		lifecycle, state, ports, labels, telemetry, image   string
		share                                               string
		created, updated, touched, expires, released, ended sql.NullInt64
		cleanupStarted, cleanupRetry, telemetryAt, taken    sql.NullInt64
	)
	err := sc.Scan(
		&l.ID, &l.Slug, &l.Provider, &lifecycle, &state, &l.Owner, &l.Org,
		&l.Target, &l.Class, &l.ServerType, &l.CloudID, &l.ServerName, &l.Host,
		&l.SSHUser, &l.SSHPort, &ports, &l.SSHHostKey, &l.WorkRoot, &l.Keep,
		&l.TTLSeconds, &l.IdleTimeoutSeconds,
		&created, &updated, &touched, &expires, &released, &ended,
		&l.EstimatedHourlyUSD, &l.MaxEstimatedUSD,
		&l.CleanupAttempts, &l.CleanupError, &cleanupStarted, &cleanupRetry,
		&l.ReleaseDeletesServer, &l.FailureError, &labels, &l.ServerKept, &telemetry, &telemetryAt, &image, &l.Location,
		&l.Pool, &taken,
		&l.CreateAttemptID, &l.RequestHash, &l.CleanupToken, &r.claimUntil,
		&r.reserveToken, &r.reserveUntil,
		&share,
	)
	if err != nil {
		return row{}, err
	}
	l.Lifecycle, l.State = store.Lifecycle(lifecycle), store.LeaseState(state)
	l.Image, l.ImageSource = imageFromColumn(image)
	l.CreatedAt, l.UpdatedAt, l.LastTouchedAt = fromTS(created), fromTS(updated), fromTS(touched)
	l.ExpiresAt, l.ReleasedAt, l.EndedAt = fromTS(expires), fromTS(released), fromTS(ended)
	l.CleanupStartedAt, l.CleanupRetryAt = fromTS(cleanupStarted), fromTS(cleanupRetry)
	l.PoolTakenAt = fromTS(taken)
	if telemetry != "" {
		l.Telemetry, l.TelemetryAt = json.RawMessage(telemetry), fromTS(telemetryAt)
	}
	if err := json.Unmarshal([]byte(ports), &l.SSHFallbackPorts); err != nil {
		return row{}, fmt.Errorf("lease %s: ssh_fallback_ports: %w", l.ID, err)
	}
	if err := json.Unmarshal([]byte(labels), &l.Labels); err != nil {
		return row{}, fmt.Errorf("lease %s: labels: %w", l.ID, err)
	}
	if l.Share, err = shareFromColumn(share); err != nil {
		return row{}, fmt.Errorf("lease %s: share: %w", l.ID, err)
	}
	if len(l.SSHFallbackPorts) == 0 {
		l.SSHFallbackPorts = nil
	}
	if len(l.Labels) == 0 {
		l.Labels = nil
	}
	return r, nil
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

// storedImage is the image column of a lease whose image source is known.
// Leases stored before the source was recorded hold the bare image ID,
// and so does a lease without a source.
type storedImage struct {
	ID     string `json:"id"`
	Source string `json:"source"`
}

func imageColumn(id, source string) string {
	if source == "" {
		return id
	}
	b, _ := json.Marshal(storedImage{ID: id, Source: source}) // two strings always marshal
	return string(b)
}

// imageFromColumn reads the image column: the object imageColumn writes,
// or a bare image ID (which may itself start with a brace).
func imageFromColumn(v string) (id, source string) {
	var im storedImage
	if strings.HasPrefix(v, "{") && json.Unmarshal([]byte(v), &im) == nil && im.ID != "" && im.Source != "" {
		return im.ID, im.Source
	}
	return v, ""
}
