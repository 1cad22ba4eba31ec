-- unfinished: KEYS[1] = the name's record. Writes nothing.
-- Returns unfinished_ms when its round was cut short and may run again: unfinished_ms is set,
-- slot_ms equals it (no later instant claimed), rerun_ms differs (not yet run a second time)
-- and the lease is not live by the server's clock; nil otherwise.
-- The store sends one call per name, all in one pipeline (see the crate documentation).
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local rec = redis.call('HMGET', KEYS[1], 'expires_at_ms', 'slot_ms', 'unfinished_ms', 'rerun_ms')
local u = rec[3]
if not u or rec[2] ~= u or rec[4] == u then
  return nil
end
if (tonumber(rec[1]) or 0) > now then
  return nil
end
return u
