-- renew: KEYS[1] = the name's record. ARGV[1] = holder token (hex), ARGV[2] = ttl in ms.
-- Extends a lease that is live by the server's clock and held under ARGV[1] to ttl from now.
-- Returns {term, ttl_ms}, or nil when the lease is not live under this holder.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local rec = redis.call('HMGET', KEYS[1], 'holder', 'term', 'expires_at_ms')
local exp = tonumber(rec[3])
if not exp or exp <= now or rec[1] ~= ARGV[1] then
  return nil
end
local ttl = tonumber(ARGV[2])
redis.call('HSET', KEYS[1], 'expires_at_ms', string.format('%d', now + ttl))
return {tonumber(rec[2]), ttl}
