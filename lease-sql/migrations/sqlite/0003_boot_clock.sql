-- SQLite only: expiries on the host's boot clock, recorded with the boot they were measured in.
-- The store converts a file's wall-clock expiries on its first start after this migration.
CREATE TABLE IF NOT EXISTS leases_clock (
    id      INTEGER NOT NULL PRIMARY KEY CHECK (id = 1),
    boot_id TEXT NOT NULL
);

CREATE TRIGGER IF NOT EXISTS leases_boot_clock_insert
BEFORE INSERT ON leases WHEN NEW.expires_at_ms >= 1000000000000
BEGIN SELECT RAISE(ABORT, 'lease-sql: leases keeps its expiries on the boot clock; a process of an older lease-sql (wall-clock expiries) still writes it: stop or upgrade it'); END;

CREATE TRIGGER IF NOT EXISTS leases_boot_clock_update
BEFORE UPDATE OF expires_at_ms ON leases WHEN NEW.expires_at_ms >= 1000000000000
BEGIN SELECT RAISE(ABORT, 'lease-sql: leases keeps its expiries on the boot clock; a process of an older lease-sql (wall-clock expiries) still writes it: stop or upgrade it'); END;

CREATE TRIGGER IF NOT EXISTS leases_partitions_boot_clock_insert
BEFORE INSERT ON leases_partitions WHEN NEW.expires_at_ms >= 1000000000000
BEGIN SELECT RAISE(ABORT, 'lease-sql: leases_partitions keeps its expiries on the boot clock; a process of an older lease-sql (wall-clock expiries) still writes it: stop or upgrade it'); END;

CREATE TRIGGER IF NOT EXISTS leases_partitions_boot_clock_update
BEFORE UPDATE OF expires_at_ms ON leases_partitions WHEN NEW.expires_at_ms >= 1000000000000
BEGIN SELECT RAISE(ABORT, 'lease-sql: leases_partitions keeps its expiries on the boot clock; a process of an older lease-sql (wall-clock expiries) still writes it: stop or upgrade it'); END;

CREATE TRIGGER IF NOT EXISTS leases_members_boot_clock_insert
BEFORE INSERT ON leases_members WHEN NEW.expires_at_ms >= 1000000000000
BEGIN SELECT RAISE(ABORT, 'lease-sql: leases_members keeps its expiries on the boot clock; a process of an older lease-sql (wall-clock expiries) still writes it: stop or upgrade it'); END;

CREATE TRIGGER IF NOT EXISTS leases_members_boot_clock_update
BEFORE UPDATE OF expires_at_ms ON leases_members WHEN NEW.expires_at_ms >= 1000000000000
BEGIN SELECT RAISE(ABORT, 'lease-sql: leases_members keeps its expiries on the boot clock; a process of an older lease-sql (wall-clock expiries) still writes it: stop or upgrade it'); END;
