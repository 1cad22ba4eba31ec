-- forget: KEYS[1] = the name's record. ARGV[1] = minimum idle time in ms.
-- Deletes the record when its lease ended (released or expired) at least ARGV[1] ms ago by the
-- server's clock. A live lease is never deleted. Returns 1 when the record was deleted.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local exp = tonumber(redis.call('HGET', KEYS[1], 'expires_at_ms'))
if not exp or exp > now or now - exp < tonumber(ARGV[1]) then
  return 0
end
redis.call('DEL', KEYS[1])
return 1
