-- The lease table of lease-sql (mysql). Slot columns serve the scheduler.
CREATE TABLE IF NOT EXISTS leases (
    name               VARBINARY(255) NOT NULL PRIMARY KEY,
    holder             CHAR(32) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    instance           VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
    term               BIGINT NOT NULL,
    expires_at_ms      BIGINT NOT NULL,
    slot_ms            BIGINT NULL,
    unfinished_slot_ms BIGINT NULL,
    rerun_slot_ms      BIGINT NULL
) ENGINE=InnoDB;
