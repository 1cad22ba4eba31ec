-- release_permit: KEYS[1] = the name's permits (see permit.lua).
-- ARGV[1] = the permit's index (decimal), ARGV[2] = holder token (hex).
-- Ends a permit that is live by the server's clock and held under ARGV[2]: its expiry becomes
-- now; its record, and the name's 'term', stay. Returns 1 when a live permit was ended, 0
-- otherwise.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local v = redis.call('HGET', KEYS[1], ARGV[1])
if not v then
  return 0
end
local p = permit(ARGV[1], v)
if p.exp <= now or p.holder ~= ARGV[2] then
  return 0
end
redis.call('HSET', KEYS[1], ARGV[1], permit_value(p.term, now, p.holder, p.instance))
changed('permits')
return 1
