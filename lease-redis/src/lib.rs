//! Leases on Redis: one Lua script per operation, TIME as the clock.
