-- The partition and member tables of lease-sql (sqlite): partitioned leases and membership.
CREATE TABLE IF NOT EXISTS leases_partitions (
    group_name    TEXT NOT NULL,
    partition_no  INTEGER NOT NULL,
    owner         TEXT NOT NULL,
    epoch         INTEGER NOT NULL,
    expires_at_ms INTEGER NOT NULL,
    PRIMARY KEY (group_name, partition_no)
);

CREATE TABLE IF NOT EXISTS leases_members (
    service       TEXT NOT NULL,
    node          TEXT NOT NULL,
    address       TEXT NOT NULL,
    group_list    TEXT NOT NULL,
    expires_at_ms INTEGER NOT NULL,
    PRIMARY KEY (service, node)
);
