-- claim_slot: KEYS[1] = the name's record (a hash).
-- ARGV[1] = holder token (hex), ARGV[2] = instance label, ARGV[3] = ttl in ms,
-- ARGV[4] = '1' to floor the term at the server's clock in microseconds, '0' otherwise,
-- ARGV[5] = the instant, ms since the Unix epoch as a decimal integer.
-- The script runs atomically: it reads the record, then writes it with nothing in between, so
-- the write is always made against the term it read (SQL's "read, then write with the term
-- compared", in one round trip). Of several replicas claiming the same instant, the first script
-- to run claims it; the others read the lease live and get 'held'.
-- Returns {outcome, term, ttl_ms, instant}:
--   {'held', false, false, false}      someone holds the lease live (the same holder too);
--   {'taken', false, false, last}       the instant is not later than slot_ms;
--   {'early', false, false, now}        the instant is later than the server's clock;
--   {'claimed', term, ttl, superseded}  claimed: slot_ms = unfinished_ms = the instant
--                                       (rerun_ms kept); superseded = the previous
--                                       unfinished_ms, or false (nil).
-- Instants are kept and compared as decimal strings, so every i64 stays exact.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local rec = redis.call('HMGET', KEYS[1], 'term', 'expires_at_ms', 'slot_ms', 'unfinished_ms')
local term = tonumber(rec[1])
if rec[1] and not term then
  return redis.error_reply('LEASECORRUPT the lease record ' .. KEYS[1] .. ' holds a term that is not a number')
end
if rec[3] and not string.match(rec[3], '^%-?%d+$') then
  return redis.error_reply('LEASECORRUPT the lease record ' .. KEYS[1] .. ' holds a slot_ms that is not an integer')
end
term = term or 0
local exp = tonumber(rec[2]) or 0
if exp > now then
  return {'held', false, false, false}
end
local instant = ARGV[5]
if rec[3] and cmp(instant, rec[3]) <= 0 then
  return {'taken', false, false, rec[3]}
end
local now_ms = string.format('%d', now)
if cmp(instant, now_ms) > 0 then
  return {'early', false, false, now_ms}
end
local ttl = tonumber(ARGV[3])
term = next_term(term, t, ARGV[4])
redis.call('HSET', KEYS[1],
  'holder', ARGV[1],
  'instance', ARGV[2],
  'term', string.format('%d', term),
  'expires_at_ms', string.format('%d', now + ttl),
  'slot_ms', instant,
  'unfinished_ms', instant)
changed('slots')
return {'claimed', term, ttl, rec[4]}
