-- claim_rerun: KEYS[1] = the name's record.
-- ARGV[1] = holder token (hex), ARGV[2] = instance label, ARGV[3] = ttl in ms,
-- ARGV[4] = '1' to floor the term at the server's clock in microseconds, '0' otherwise,
-- ARGV[5] = the unfinished instant to run again.
-- One atomic conditional write: when unfinished_ms = slot_ms = ARGV[5], rerun_ms differs and
-- the lease is not live by the server's clock, the name passes to ARGV[1] (term + 1, expiry =
-- now + ttl) and rerun_ms = ARGV[5], so the instant runs a second time at most once.
-- Returns {term, ttl_ms}, or nil when the instant may not run again.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local rec = redis.call('HMGET', KEYS[1], 'term', 'expires_at_ms', 'slot_ms', 'unfinished_ms', 'rerun_ms')
local instant = ARGV[5]
if rec[4] ~= instant or rec[3] ~= instant or rec[5] == instant then
  return nil
end
if (tonumber(rec[2]) or 0) > now then
  return nil
end
local term = tonumber(rec[1])
if not term then
  return redis.error_reply('LEASECORRUPT the lease record ' .. KEYS[1] .. ' holds a term that is not a number')
end
local ttl = tonumber(ARGV[3])
term = next_term(term, t, ARGV[4])
redis.call('HSET', KEYS[1],
  'holder', ARGV[1],
  'instance', ARGV[2],
  'term', string.format('%d', term),
  'expires_at_ms', string.format('%d', now + ttl),
  'rerun_ms', instant)
changed('slots')
return {term, ttl}
