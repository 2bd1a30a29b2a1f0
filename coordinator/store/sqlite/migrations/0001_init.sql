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
	ssh_fallback_ports TEXT NOT NULL DEFAULT '[]',
	ssh_host_key TEXT NOT NULL DEFAULT '',
	work_root TEXT NOT NULL DEFAULT '',
	keep INTEGER NOT NULL DEFAULT 0,
	ttl_seconds INTEGER NOT NULL,
	idle_timeout_seconds INTEGER NOT NULL,
	created_at INTEGER NOT NULL,
	updated_at INTEGER NOT NULL,
	last_touched_at INTEGER NOT NULL,
	expires_at INTEGER NOT NULL,
	released_at INTEGER,
	ended_at INTEGER,
	estimated_hourly_usd REAL NOT NULL DEFAULT 0,
	max_estimated_usd REAL NOT NULL DEFAULT 0,
	cleanup_attempts INTEGER NOT NULL DEFAULT 0,
	cleanup_error TEXT NOT NULL DEFAULT '',
	cleanup_started_at INTEGER,
	cleanup_retry_at INTEGER,
	release_deletes_server INTEGER NOT NULL DEFAULT 0,
	failure_error TEXT NOT NULL DEFAULT '',
	labels TEXT NOT NULL DEFAULT '{}',
	create_attempt_id TEXT NOT NULL DEFAULT '',
	request_hash TEXT NOT NULL DEFAULT '',
	cleanup_token TEXT NOT NULL DEFAULT '',
	cleanup_claim_until INTEGER
);

CREATE UNIQUE INDEX leases_live_slug ON leases (owner, org, slug)
	WHERE slug <> '' AND state IN ('provisioning', 'active');

CREATE INDEX leases_created ON leases (created_at);

CREATE INDEX leases_owner_created ON leases (owner, org, created_at);

CREATE INDEX leases_slug ON leases (slug);

CREATE INDEX leases_not_ended ON leases (expires_at) WHERE ended_at IS NULL;

-- What ended managed leases cost per month (start of month), owner and org.
CREATE TABLE lease_spend (
	month INTEGER NOT NULL,
	owner TEXT NOT NULL,
	org TEXT NOT NULL,
	usd REAL NOT NULL,
	PRIMARY KEY (month, owner, org)
);

CREATE TABLE create_attempts (
	owner TEXT NOT NULL,
	org TEXT NOT NULL,
	attempt_id TEXT NOT NULL,
	lease_id TEXT NOT NULL,
	canceled INTEGER NOT NULL,
	created_at INTEGER NOT NULL,
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
	command TEXT NOT NULL DEFAULT '[]',
	label TEXT NOT NULL DEFAULT '',
	state TEXT NOT NULL CHECK (state IN ('running', 'succeeded', 'failed')),
	phase TEXT NOT NULL DEFAULT '',
	exit_code INTEGER,
	sync_ms INTEGER NOT NULL DEFAULT 0,
	command_ms INTEGER NOT NULL DEFAULT 0,
	duration_ms INTEGER NOT NULL DEFAULT 0,
	log_bytes INTEGER NOT NULL DEFAULT 0,
	log_truncated INTEGER NOT NULL DEFAULT 0,
	results TEXT NOT NULL DEFAULT '',
	started_at INTEGER NOT NULL,
	last_event_at INTEGER,
	event_count INTEGER NOT NULL DEFAULT 0,
	ended_at INTEGER,
	finish_hash TEXT NOT NULL DEFAULT ''
);

CREATE INDEX runs_started ON runs (started_at);

CREATE INDEX runs_lease ON runs (lease_id, started_at);

CREATE TABLE run_events (
	run_id TEXT NOT NULL REFERENCES runs (id),
	seq INTEGER NOT NULL,
	type TEXT NOT NULL DEFAULT '',
	phase TEXT NOT NULL DEFAULT '',
	stream TEXT NOT NULL DEFAULT '',
	message TEXT NOT NULL DEFAULT '',
	data TEXT NOT NULL DEFAULT '',
	created_at INTEGER NOT NULL,
	PRIMARY KEY (run_id, seq)
);

CREATE TABLE run_logs (
	run_id TEXT PRIMARY KEY REFERENCES runs (id),
	log BLOB NOT NULL
);
