-- leave: KEYS[1] = the service's member records, KEYS[2] = their expiries (see heartbeat.lua).
-- ARGV[1] = node id.
-- Deletes the node's record (live or not), so it drops out of members at once.
-- Returns 1 when the record was live by the server's clock, 0 otherwise.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local exp = tonumber(redis.call('ZSCORE', KEYS[2], ARGV[1]))
redis.call('HDEL', KEYS[1], ARGV[1])
redis.call('ZREM', KEYS[2], ARGV[1])
if exp and exp > now then
  return 1
end
return 0
