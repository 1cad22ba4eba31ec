-- release_partitions: KEYS[1] = the group's partition leases (see acquire_partition.lua).
-- ARGV[1] = owner, ARGV[2..] = partition numbers (decimal).
-- Ends every lease among ARGV[2..] that is live by the server's clock and held by ARGV[1]: its
-- expiry becomes now; the record, its owner and its epoch stay, so the next acquire gets
-- epoch + 1. Duplicates count once. Every record is read and checked before anything is
-- written. HMGET and HSET take at most 1,000 partitions each (see renew_partitions.lua).
-- Returns how many live leases it ended.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local owner = ARGV[1]
local now_ms = string.format('%d', now)
local chunk = 1000
local seen = {}
local writes = {}
local i = 2
while i <= #ARGV do
  local last = math.min(i + chunk - 1, #ARGV)
  local fields = {}
  for j = i, last do
    if not seen[ARGV[j]] then
      seen[ARGV[j]] = true
      fields[#fields + 1] = ARGV[j]
    end
  end
  if #fields > 0 then
    local vals = redis.call('HMGET', KEYS[1], unpack(fields))
    for k = 1, #fields do
      local v = vals[k]
      if v then
        local e, x, o = string.match(v, '^(%d+) (%d+) (.*)$')
        if not e then
          return redis.error_reply('LEASECORRUPT the partition ' .. fields[k] .. ' of ' .. KEYS[1] .. ' is not "<epoch> <expires_at_ms> <owner>"')
        end
        if o == owner and tonumber(x) > now then
          writes[#writes + 1] = fields[k]
          writes[#writes + 1] = e .. ' ' .. now_ms .. ' ' .. owner
        end
      end
    end
  end
  i = last + 1
end
for w = 1, #writes, 2 * chunk do
  redis.call('HSET', KEYS[1], unpack(writes, w, math.min(w + 2 * chunk - 1, #writes)))
end
if #writes > 0 then
  changed('group')
end
return #writes / 2
