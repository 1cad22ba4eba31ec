-- release: KEYS[1] = the name's record, KEYS[2] = its waiters' mark (see notify.lua).
-- ARGV[1] = holder token (hex).
-- Ends a lease that is live by the server's clock and held under ARGV[1]: its expiry becomes
-- now, the record and its term stay. Returns 1 when a live lease was ended, 0 otherwise.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local rec = redis.call('HMGET', KEYS[1], 'holder', 'expires_at_ms')
local exp = tonumber(rec[2])
if not exp or exp <= now or rec[1] ~= ARGV[1] then
  return 0
end
redis.call('HSET', KEYS[1], 'expires_at_ms', string.format('%d', now))
changed_if_waited('lease')
return 1
