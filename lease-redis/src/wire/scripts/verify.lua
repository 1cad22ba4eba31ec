-- verify: KEYS[1] = the name's record. ARGV[1] = holder token (hex).
-- Returns {term, remaining_ms} when the lease is live by the server's clock and held under
-- ARGV[1], nil otherwise. Writes nothing.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local rec = redis.call('HMGET', KEYS[1], 'holder', 'term', 'expires_at_ms')
local exp = tonumber(rec[3])
if not exp or exp <= now or rec[1] ~= ARGV[1] then
  return nil
end
return {tonumber(rec[2]), exp - now}
