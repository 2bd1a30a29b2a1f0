-- Brokered native checkpoints, their recent audit events and their use
-- claims (only a hash of each claim's token). Times are Unix microseconds
-- (UTC); NULL means unset.

CREATE TABLE checkpoints (
	id TEXT PRIMARY KEY,
	owner TEXT NOT NULL,
	org TEXT NOT NULL,
	provider TEXT NOT NULL,
	source_lease TEXT NOT NULL,
	state TEXT NOT NULL CHECK (state IN ('creating', 'ready', 'deleting', 'deleted', 'failed')),
	target TEXT NOT NULL DEFAULT '',
	class TEXT NOT NULL DEFAULT '',
	server_type TEXT NOT NULL DEFAULT '',
	location TEXT NOT NULL DEFAULT '',
	work_root TEXT NOT NULL DEFAULT '',
	ssh_user TEXT NOT NULL DEFAULT '',
	ssh_port TEXT NOT NULL DEFAULT '',
	artifact_id TEXT NOT NULL DEFAULT '',
	locators TEXT NOT NULL DEFAULT '{}',
	artifact_labels TEXT NOT NULL DEFAULT '{}',
	size_bytes BIGINT NOT NULL DEFAULT 0,
	gb_month_usd DOUBLE PRECISION NOT NULL DEFAULT 0,
	labels TEXT NOT NULL DEFAULT '{}',
	unused_expiry_seconds BIGINT NOT NULL DEFAULT 0,
	uses BIGINT NOT NULL DEFAULT 0,
	created_at BIGINT NOT NULL,
	updated_at BIGINT NOT NULL,
	ready_at BIGINT,
	last_used_at BIGINT,
	expires_at BIGINT,
	delete_requested_at BIGINT,
	deleted_at BIGINT,
	failure_error TEXT NOT NULL DEFAULT '',
	delete_pending BOOLEAN NOT NULL DEFAULT FALSE,
	cleanup_attempts BIGINT NOT NULL DEFAULT 0,
	cleanup_error TEXT NOT NULL DEFAULT '',
	cleanup_retry_at BIGINT,
	cleanup_token TEXT NOT NULL DEFAULT '',
	cleanup_claim_until BIGINT,
	event_seq BIGINT NOT NULL DEFAULT 0
);

CREATE INDEX checkpoints_owner_created ON checkpoints (owner, org, created_at);

-- The due index of the cleanup scheduler: checkpoints that may need work.
CREATE INDEX checkpoints_due ON checkpoints (state, expires_at)
	WHERE state IN ('creating', 'ready', 'deleting') OR delete_pending;

CREATE TABLE checkpoint_events (
	checkpoint_id TEXT NOT NULL,
	seq BIGINT NOT NULL,
	type TEXT NOT NULL,
	actor TEXT NOT NULL DEFAULT '',
	message TEXT NOT NULL DEFAULT '',
	lease_id TEXT NOT NULL DEFAULT '',
	created_at BIGINT NOT NULL,
	PRIMARY KEY (checkpoint_id, seq)
);

CREATE TABLE checkpoint_claims (
	token_hash TEXT PRIMARY KEY,
	checkpoint_id TEXT NOT NULL,
	owner TEXT NOT NULL,
	org TEXT NOT NULL,
	created_at BIGINT NOT NULL,
	expires_at BIGINT NOT NULL,
	used_at BIGINT,
	lease_id TEXT NOT NULL DEFAULT ''
);

CREATE INDEX checkpoint_claims_checkpoint ON checkpoint_claims (checkpoint_id, expires_at);

CREATE INDEX checkpoint_claims_lease ON checkpoint_claims (lease_id) WHERE lease_id <> '';
