-- Ready pools: their definitions and counters, the pool a lease's box was
-- made by (and when it was handed to its owner), the reservation a take
-- holds on an idle box (its fencing token is private), and the idle spans
-- of taken boxes, which count for the pool's owner and org in Usage.
-- Times are Unix microseconds (UTC); NULL means unset.

CREATE TABLE pools (
	pool_key TEXT PRIMARY KEY,
	provider TEXT NOT NULL,
	class TEXT NOT NULL DEFAULT '',
	server_type TEXT NOT NULL DEFAULT '',
	image TEXT NOT NULL DEFAULT '',
	location TEXT NOT NULL DEFAULT '',
	org TEXT NOT NULL DEFAULT '',
	target INTEGER NOT NULL,
	max_boxes INTEGER NOT NULL,
	max_age_seconds INTEGER NOT NULL,
	schedule TEXT NOT NULL DEFAULT '[]',
	exclusive INTEGER NOT NULL DEFAULT 0,
	taken_total INTEGER NOT NULL DEFAULT 0,
	last_error TEXT NOT NULL DEFAULT '',
	created_at INTEGER NOT NULL,
	updated_at INTEGER NOT NULL
);

ALTER TABLE leases ADD COLUMN pool TEXT NOT NULL DEFAULT '';

ALTER TABLE leases ADD COLUMN pool_taken_at INTEGER;

ALTER TABLE leases ADD COLUMN pool_reserve_token TEXT NOT NULL DEFAULT '';

ALTER TABLE leases ADD COLUMN pool_reserve_until INTEGER;

-- Not-ended leases by pool (the predicate is one every pool query states,
-- so both databases use the index).
CREATE INDEX leases_pool_idle ON leases (pool, created_at)
	WHERE pool_taken_at IS NULL AND ended_at IS NULL;

CREATE INDEX leases_request_hash ON leases (owner, org, request_hash);

CREATE TABLE pool_idle_spans (
	lease_id TEXT PRIMARY KEY,
	pool TEXT NOT NULL,
	owner TEXT NOT NULL,
	org TEXT NOT NULL,
	provider TEXT NOT NULL,
	server_type TEXT NOT NULL DEFAULT '',
	created_at INTEGER NOT NULL,
	ended_at INTEGER NOT NULL,
	estimated_hourly_usd REAL NOT NULL DEFAULT 0
);

CREATE INDEX pool_idle_spans_ended ON pool_idle_spans (ended_at);
