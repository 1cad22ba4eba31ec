-- The lease table of lease-sql (postgres). Slot columns serve the scheduler.
CREATE TABLE IF NOT EXISTS leases (
    name               VARCHAR(255) COLLATE "C" NOT NULL PRIMARY KEY,
    holder             TEXT NOT NULL,
    instance           TEXT NOT NULL,
    term               BIGINT NOT NULL,
    expires_at_ms      BIGINT NOT NULL,
    slot_ms            BIGINT NULL,
    unfinished_slot_ms BIGINT NULL,
    rerun_slot_ms      BIGINT NULL
);
