-- Lease shares: who a lease is shared with beyond its owner. The share
-- column holds the whole share as JSON ('' for none) and is read with the
-- lease; lease_grants holds one row per grantee ('user:<owner>' for a
-- named user in any org, 'org:<org>' for every user of the lease's org),
-- written in the same transaction, to find the leases shared with a user.

ALTER TABLE leases ADD COLUMN share TEXT NOT NULL DEFAULT '';

CREATE TABLE lease_grants (
	lease_id TEXT NOT NULL,
	grantee TEXT NOT NULL,
	PRIMARY KEY (lease_id, grantee)
);

CREATE INDEX lease_grants_grantee ON lease_grants (grantee, lease_id);
