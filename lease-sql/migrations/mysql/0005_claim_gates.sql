-- The claim-gate columns of lease-sql (mysql): lock-delay and hand-over. Every claim writes them:
-- a lease-sql with claim gates refuses to start without them.
ALTER TABLE leases ADD COLUMN gate_ms BIGINT NOT NULL DEFAULT 0;
ALTER TABLE leases ADD COLUMN gate_for VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NULL;
