-- finish_slot: KEYS[1] = the name's record.
-- ARGV[1] = holder token (hex), ARGV[2] = the instant whose round ended,
-- ARGV[3] = passed (the last instant of the schedule to have come), or '' for none.
-- held = the lease is live by the server's clock under ARGV[1]. When slot_ms = ARGV[2] (no
-- later instant claimed): the end is recorded, unfinished_ms is removed if it is ARGV[2], and
-- when held and ARGV[2] < passed <= now, slot_ms = passed. When held: expires_at_ms = now (the
-- lease is given back, the term kept). All in one atomic script.
-- Returns {recorded, passed_taken, released}, each 1 or 0.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local rec = redis.call('HMGET', KEYS[1], 'holder', 'expires_at_ms', 'slot_ms', 'unfinished_ms')
local exp = tonumber(rec[2])
if not exp then
  return {0, 0, 0}
end
local held = exp > now and rec[1] == ARGV[1]
local recorded, taken, released = 0, 0, 0
local instant = ARGV[2]
if rec[3] == instant then
  recorded = 1
  if rec[4] == instant then
    redis.call('HDEL', KEYS[1], 'unfinished_ms')
  end
  local passed = ARGV[3]
  if held and passed ~= '' and cmp(passed, string.format('%d', now)) <= 0
      and cmp(passed, instant) > 0 then
    redis.call('HSET', KEYS[1], 'slot_ms', passed)
    taken = 1
  end
end
if held then
  redis.call('HSET', KEYS[1], 'expires_at_ms', string.format('%d', now))
  released = 1
end
if recorded == 1 or released == 1 then
  changed('slots')
end
return {recorded, taken, released}
