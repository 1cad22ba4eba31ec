-- The permit table of lease-sql (sqlite): counted leases. The row with permit_no = -1 is each name's counter.
CREATE TABLE IF NOT EXISTS leases_permits (
    name          TEXT NOT NULL,
    permit_no     INTEGER NOT NULL,
    holder        TEXT NOT NULL,
    instance      TEXT NOT NULL,
    term          INTEGER NOT NULL,
    expires_at_ms INTEGER NOT NULL,
    PRIMARY KEY (name, permit_no)
);
