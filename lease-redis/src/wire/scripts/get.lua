-- get: KEYS[1] = the name's record.
-- Returns {instance, term, live (1/0), remaining_ms by the server's clock}, or nil when the
-- name was never claimed. Writes nothing.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local rec = redis.call('HMGET', KEYS[1], 'instance', 'term', 'expires_at_ms')
local term = tonumber(rec[2])
if not term then
  return nil
end
local exp = tonumber(rec[3]) or 0
if exp > now then
  return {rec[1] or '', term, 1, exp - now}
end
return {rec[1] or '', term, 0, 0}
