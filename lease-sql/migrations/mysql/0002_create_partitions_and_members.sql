-- The partition and member tables of lease-sql (mysql): partitioned leases and membership.
CREATE TABLE IF NOT EXISTS leases_partitions (
    group_name    VARBINARY(255) NOT NULL,
    partition_no  INT UNSIGNED NOT NULL,
    owner         VARBINARY(128) NOT NULL,
    epoch         BIGINT NOT NULL,
    expires_at_ms BIGINT NOT NULL,
    PRIMARY KEY (group_name, partition_no)
) ENGINE=InnoDB;

CREATE TABLE IF NOT EXISTS leases_members (
    service       VARBINARY(255) NOT NULL,
    node          VARBINARY(128) NOT NULL,
    address       VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
    group_list    TEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
    expires_at_ms BIGINT NOT NULL,
    PRIMARY KEY (service, node)
) ENGINE=InnoDB;
