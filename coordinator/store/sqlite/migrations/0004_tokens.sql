-- The token registry: user tokens the coordinator issued (never the token
-- itself) and revocations, including tombstones for IDs it never issued
-- (owner ''). Times are Unix microseconds (UTC); NULL means unset.

CREATE TABLE tokens (
	id TEXT PRIMARY KEY,
	owner TEXT NOT NULL DEFAULT '',
	org TEXT NOT NULL DEFAULT '',
	login TEXT NOT NULL DEFAULT '',
	source TEXT NOT NULL DEFAULT '',
	created_at INTEGER,
	expires_at INTEGER,
	revoked_at INTEGER,
	revoked_by TEXT NOT NULL DEFAULT '',
	-- A GitHub sign-in's GitHub credential, sealed by the coordinator, for
	-- checking the user's membership again; when that was last done.
	github TEXT NOT NULL DEFAULT '',
	checked_at INTEGER
);

CREATE INDEX tokens_owner_created ON tokens (owner, org, created_at);

CREATE INDEX tokens_revoked ON tokens (expires_at) WHERE revoked_at IS NOT NULL;

CREATE INDEX tokens_check ON tokens (checked_at) WHERE github <> '' AND revoked_at IS NULL;
