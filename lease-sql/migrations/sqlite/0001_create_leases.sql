-- The lease table of lease-sql (sqlite). Slot columns serve the scheduler.
CREATE TABLE IF NOT EXISTS leases (
    name               TEXT NOT NULL PRIMARY KEY,
    holder             TEXT NOT NULL,
    instance           TEXT NOT NULL,
    term               INTEGER NOT NULL,
    expires_at_ms      INTEGER NOT NULL,
    slot_ms            INTEGER NULL,
    unfinished_slot_ms INTEGER NULL,
    rerun_slot_ms      INTEGER NULL
);
