-- renew_permit: KEYS[1] = the name's permits (see permit.lua).
-- ARGV[1] = the permit's index (decimal), ARGV[2] = holder token (hex), ARGV[3] = ttl in ms.
-- Extends a permit that is live by the server's clock and held under ARGV[2] to ttl from now,
-- keeping its term. Returns {term, ttl_ms}, or nil when it is not live under this holder.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local v = redis.call('HGET', KEYS[1], ARGV[1])
if not v then
  return nil
end
local p = permit(ARGV[1], v)
if p.exp <= now or p.holder ~= ARGV[2] then
  return nil
end
local ttl = tonumber(ARGV[3])
redis.call('HSET', KEYS[1], ARGV[1], permit_value(p.term, now + ttl, p.holder, p.instance))
return {p.term, ttl}
