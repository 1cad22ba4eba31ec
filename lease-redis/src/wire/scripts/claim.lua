-- claim: KEYS[1] = the name's record (a hash), KEYS[2] = its waiters' mark (see notify.lua).
-- ARGV[1] = holder token (hex), ARGV[2] = instance label, ARGV[3] = ttl in ms,
-- ARGV[4] = '1' to floor the term at the server's clock in microseconds, '0' otherwise.
-- Returns {term, ttl_ms} when the name was free (never claimed, released or expired by the
-- server's clock), nil when someone holds it live (the same holder too).
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local rec = redis.call('HMGET', KEYS[1], 'term', 'expires_at_ms')
local term = tonumber(rec[1])
if rec[1] and not term then
  return redis.error_reply('LEASECORRUPT the lease record ' .. KEYS[1] .. ' holds a term that is not a number')
end
term = term or 0
local exp = tonumber(rec[2]) or 0
if exp > now then
  return nil
end
local ttl = tonumber(ARGV[3])
term = next_term(term, t, ARGV[4])
redis.call('HSET', KEYS[1],
  'holder', ARGV[1],
  'instance', ARGV[2],
  'term', string.format('%d', term),
  'expires_at_ms', string.format('%d', now + ttl))
changed_if_waited('lease')
return {term, ttl}
