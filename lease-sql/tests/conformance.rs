//! The shared conformance suite on PostgreSQL, MariaDB/MySQL and SQLite.

mod support;

mod postgres {
    lease_conformance::conformance_suite!(crate::support::harness_postgres);
}

mod mysql {
    lease_conformance::conformance_suite!(crate::support::harness_mysql);
}

mod sqlite {
    lease_conformance::conformance_suite!(crate::support::harness_sqlite);
}
