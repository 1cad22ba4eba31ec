-- The permit table of lease-sql (mysql): counted leases. The row with permit_no = -1 is each name's counter.
CREATE TABLE IF NOT EXISTS leases_permits (
    name          VARBINARY(255) NOT NULL,
    permit_no     BIGINT NOT NULL,
    holder        CHAR(32) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    instance      VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
    term          BIGINT NOT NULL,
    expires_at_ms BIGINT NOT NULL,
    PRIMARY KEY (name, permit_no)
) ENGINE=InnoDB;
