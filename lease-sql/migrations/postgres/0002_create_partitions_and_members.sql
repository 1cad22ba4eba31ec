-- The partition and member tables of lease-sql (postgres): partitioned leases and membership.
CREATE TABLE IF NOT EXISTS leases_partitions (
    group_name    VARCHAR(255) COLLATE "C" NOT NULL,
    partition_no  BIGINT NOT NULL,
    owner         TEXT COLLATE "C" NOT NULL,
    epoch         BIGINT NOT NULL,
    expires_at_ms BIGINT NOT NULL,
    PRIMARY KEY (group_name, partition_no)
);

CREATE TABLE IF NOT EXISTS leases_members (
    service       VARCHAR(255) COLLATE "C" NOT NULL,
    node          TEXT COLLATE "C" NOT NULL,
    address       TEXT NOT NULL,
    group_list    TEXT NOT NULL,
    expires_at_ms BIGINT NOT NULL,
    PRIMARY KEY (service, node)
);
