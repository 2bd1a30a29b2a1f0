-- The latest host sample a heartbeat carried, and when it came.

ALTER TABLE leases ADD COLUMN telemetry TEXT NOT NULL DEFAULT '';

ALTER TABLE leases ADD COLUMN telemetry_at INTEGER;
