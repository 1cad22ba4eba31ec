-- owners: KEYS[1] = the group's partition leases (see acquire_partition.lua). Writes nothing.
-- Returns {{partition, epoch, remaining_ms, owner}, ...} for every lease that is live by the
-- server's clock, in no particular order.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local all = redis.call('HGETALL', KEYS[1])
local out = {}
for i = 1, #all, 2 do
  local e, x, o = string.match(all[i + 1], '^(%d+) (%d+) (.*)$')
  if not e or not string.match(all[i], '^%d+$') then
    return redis.error_reply('LEASECORRUPT the field ' .. all[i] .. ' of ' .. KEYS[1] .. ' is not a partition lease')
  end
  local exp = tonumber(x)
  if exp > now then
    out[#out + 1] = {tonumber(all[i]), tonumber(e), exp - now, o}
  end
end
return out
