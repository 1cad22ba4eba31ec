-- The permit table of lease-sql (postgres): counted leases. The row with permit_no = -1 is each name's counter.
CREATE TABLE IF NOT EXISTS leases_permits (
    name          VARCHAR(255) COLLATE "C" NOT NULL,
    permit_no     BIGINT NOT NULL,
    holder        TEXT NOT NULL,
    instance      TEXT NOT NULL,
    term          BIGINT NOT NULL,
    expires_at_ms BIGINT NOT NULL,
    PRIMARY KEY (name, permit_no)
);
