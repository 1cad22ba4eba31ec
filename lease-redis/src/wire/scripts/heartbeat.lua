-- heartbeat: KEYS[1] = the service's member records (a hash: node id -> '<address>\n<groups>',
-- the groups one per line), KEYS[2] = their expiries (a sorted set: node id scored by
-- expires_at_ms, server time). Both keys share the service's hash tag.
-- ARGV[1] = node id, ARGV[2] = ttl in ms, ARGV[3] = '<address>\n<groups>'.
-- Replaces the node's record and sets its expiry to now + ttl. First removes up to 100 records
-- that expired by the server's clock (any node's), so records of nodes that never come back do
-- not pile up.
-- Returns ttl_ms.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local ttl = tonumber(ARGV[2])
local dead = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', string.format('%d', now), 'LIMIT', 0, 100)
if #dead > 0 then
  redis.call('HDEL', KEYS[1], unpack(dead))
  redis.call('ZREM', KEYS[2], unpack(dead))
end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[3])
redis.call('ZADD', KEYS[2], string.format('%d', now + ttl), ARGV[1])
return ttl
