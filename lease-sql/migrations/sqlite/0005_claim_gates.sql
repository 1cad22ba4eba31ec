-- The claim-gate columns of lease-sql (sqlite): lock-delay and hand-over. Every claim writes them:
-- a lease-sql with claim gates refuses to start without them.
ALTER TABLE leases ADD COLUMN gate_ms INTEGER NOT NULL DEFAULT 0;
ALTER TABLE leases ADD COLUMN gate_for TEXT NULL;
