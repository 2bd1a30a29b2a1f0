-- The latest host sample a heartbeat carried, and when it came; the image
-- and location a lease asked its provider for.

ALTER TABLE leases ADD COLUMN telemetry TEXT NOT NULL DEFAULT '';

ALTER TABLE leases ADD COLUMN telemetry_at INTEGER;

ALTER TABLE leases ADD COLUMN image TEXT NOT NULL DEFAULT '';

ALTER TABLE leases ADD COLUMN location TEXT NOT NULL DEFAULT '';
