-- A run's latest telemetry sample (JSON as the client sent it, '' for
-- none), and whether an ended lease's server was deliberately kept.

ALTER TABLE runs ADD COLUMN telemetry TEXT NOT NULL DEFAULT '';

ALTER TABLE leases ADD COLUMN server_kept INTEGER NOT NULL DEFAULT 0;
