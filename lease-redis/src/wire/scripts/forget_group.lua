-- forget_group: KEYS[1] = the group's partition leases (see acquire_partition.lua).
-- ARGV[1] = minimum idle time in ms.
-- Deletes the whole hash when every partition lease in it ended (released or expired) at least
-- ARGV[1] ms ago by the server's clock; a group with any lease live, or ended more recently,
-- is kept whole. Returns 1 when the hash was deleted.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local idle = tonumber(ARGV[1])
local all = redis.call('HGETALL', KEYS[1])
if #all == 0 then
  return 0
end
for i = 2, #all, 2 do
  local x = string.match(all[i], '^%d+ (%d+) ')
  if not x or now - tonumber(x) < idle then
    return 0
  end
end
redis.call('DEL', KEYS[1])
return 1
