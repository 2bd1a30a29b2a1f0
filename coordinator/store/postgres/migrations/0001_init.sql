-- Leases, create attempts, runs, run events and run logs.
-- Times are Unix microseconds (UTC); NULL means unset.

CREATE TABLE leases (
	id TEXT PRIMARY KEY,
	slug TEXT NOT NULL DEFAULT '',
	provider TEXT NOT NULL,
	lifecycle TEXT NOT NULL CHECK (lifecycle IN ('managed', 'registered')),
	state TEXT NOT NULL CHECK (state IN ('provisioning', 'active', 'released', 'expired', 'failed')),
	owner TEXT NOT NULL,
	org TEXT NOT NULL,
	target TEXT NOT NULL DEFAULT '',
	class TEXT NOT NULL DEFAULT '',
	server_type TEXT NOT NULL DEFAULT '',
	cloud_id TEXT NOT NULL DEFAULT '',
	server_name TEXT NOT NULL DEFAULT '',
	host TEXT NOT NULL DEFAULT '',
	ssh_user TEXT NOT NULL DEFAULT '',
	ssh_port TEXT NOT NULL DEFAULT '',
	ssh_fallback_ports JSONB NOT NULL DEFAULT '[]',
	ssh_host_key TEXT NOT NULL DEFAULT '',
	work_root TEXT NOT NULL DEFAULT '',
	keep BOOLEAN NOT NULL DEFAULT FALSE,
	ttl_seconds BIGINT NOT NULL,
	idle_timeout_seconds BIGINT NOT NULL,
	created_at BIGINT NOT NULL,
	updated_at BIGINT NOT NULL,
	last_touched_at BIGINT NOT NULL,
	expires_at BIGINT NOT NULL,
	released_at BIGINT,
	ended_at BIGINT,
	estimated_hourly_usd DOUBLE PRECISION NOT NULL DEFAULT 0,
	max_estimated_usd DOUBLE PRECISION NOT NULL DEFAULT 0,
	cleanup_attempts BIGINT NOT NULL DEFAULT 0,
	cleanup_error TEXT NOT NULL DEFAULT '',
	cleanup_started_at BIGINT,
	cleanup_retry_at BIGINT,
	release_deletes_server BOOLEAN NOT NULL DEFAULT FALSE,
	failure_error TEXT NOT NULL DEFAULT '',
	labels JSONB NOT NULL DEFAULT '{}',
	create_attempt_id TEXT NOT NULL DEFAULT '',
	request_hash TEXT NOT NULL DEFAULT '',
	cleanup_token TEXT NOT NULL DEFAULT '',
	cleanup_claim_until BIGINT
);

CREATE UNIQUE INDEX leases_live_slug ON leases (owner, org, slug)
	WHERE slug <> '' AND state IN ('provisioning', 'active');

CREATE INDEX leases_created ON leases (created_at);

CREATE INDEX leases_owner_created ON leases (owner, org, created_at);

CREATE INDEX leases_slug ON leases (slug);

CREATE INDEX leases_not_ended ON leases (expires_at) WHERE ended_at IS NULL;

-- What ended managed leases cost per month (start of month), owner and org.
CREATE TABLE lease_spend (
	month BIGINT NOT NULL,
	owner TEXT NOT NULL,
	org TEXT NOT NULL,
	usd DOUBLE PRECISION NOT NULL,
	PRIMARY KEY (month, owner, org)
);

CREATE TABLE create_attempts (
	owner TEXT NOT NULL,
	org TEXT NOT NULL,
	attempt_id TEXT NOT NULL,
	lease_id TEXT NOT NULL,
	canceled BOOLEAN NOT NULL,
	created_at BIGINT NOT NULL,
	PRIMARY KEY (owner, org, attempt_id)
);

CREATE TABLE runs (
	id TEXT PRIMARY KEY,
	lease_id TEXT NOT NULL DEFAULT '',
	slug TEXT NOT NULL DEFAULT '',
	owner TEXT NOT NULL,
	org TEXT NOT NULL,
	provider TEXT NOT NULL DEFAULT '',
	target TEXT NOT NULL DEFAULT '',
	class TEXT NOT NULL DEFAULT '',
	server_type TEXT NOT NULL DEFAULT '',
	command JSONB NOT NULL DEFAULT '[]',
	label TEXT NOT NULL DEFAULT '',
	state TEXT NOT NULL CHECK (state IN ('running', 'succeeded', 'failed')),
	phase TEXT NOT NULL DEFAULT '',
	exit_code BIGINT,
	sync_ms BIGINT NOT NULL DEFAULT 0,
	command_ms BIGINT NOT NULL DEFAULT 0,
	duration_ms BIGINT NOT NULL DEFAULT 0,
	log_bytes BIGINT NOT NULL DEFAULT 0,
	log_truncated BOOLEAN NOT NULL DEFAULT FALSE,
	results TEXT NOT NULL DEFAULT '',
	started_at BIGINT NOT NULL,
	last_event_at BIGINT,
	event_count BIGINT NOT NULL DEFAULT 0,
	ended_at BIGINT,
	finish_hash TEXT NOT NULL DEFAULT ''
);

CREATE INDEX runs_started ON runs (started_at);

CREATE INDEX runs_lease ON runs (lease_id, started_at);

CREATE TABLE run_events (
	run_id TEXT NOT NULL REFERENCES runs (id),
	seq BIGINT NOT NULL,
	type TEXT NOT NULL DEFAULT '',
	phase TEXT NOT NULL DEFAULT '',
	stream TEXT NOT NULL DEFAULT '',
	message TEXT NOT NULL DEFAULT '',
	data TEXT NOT NULL DEFAULT '',
	created_at BIGINT NOT NULL,
	PRIMARY KEY (run_id, seq)
);

CREATE TABLE run_logs (
	run_id TEXT PRIMARY KEY REFERENCES runs (id),
	log BYTEA NOT NULL
);
