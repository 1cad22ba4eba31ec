//! Leases on MongoDB: one conditional pipeline upsert per claim, $$NOW as the clock.
