-- force_release: KEYS[1] = the name's record, KEYS[2] = its waiters' mark (see notify.lua).
-- Ends whoever's live lease: its expiry becomes now, the record and its term stay.
-- Returns 1 when a live lease was ended, 0 otherwise.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local exp = tonumber(redis.call('HGET', KEYS[1], 'expires_at_ms'))
if not exp or exp <= now then
  return 0
end
redis.call('HSET', KEYS[1], 'expires_at_ms', string.format('%d', now))
changed_if_waited('lease')
return 1
