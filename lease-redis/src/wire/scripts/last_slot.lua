-- last_slot: KEYS[1] = the name's record. Writes nothing and needs no clock.
-- Returns {slot_ms, unfinished_ms, rerun_ms} (each a decimal string, or false (nil) when
-- unset), or nil when the name was never claimed.
local rec = redis.call('HMGET', KEYS[1], 'term', 'slot_ms', 'unfinished_ms', 'rerun_ms')
if not rec[1] then
  return nil
end
return {rec[2], rec[3], rec[4]}
