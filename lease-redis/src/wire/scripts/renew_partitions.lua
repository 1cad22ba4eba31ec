-- renew_partitions: KEYS[1] = the group's partition leases (see acquire_partition.lua).
-- ARGV[1] = owner, ARGV[2] = ttl in ms, ARGV[3..] = partition numbers (decimal).
-- Extends every lease among ARGV[3..] that is live by the server's clock and held by ARGV[1]
-- to one expiry, now + ttl; epochs are kept. A lapsed lease is never revived. Duplicates count
-- once. Every record is read and checked before anything is written, so a malformed record
-- fails the whole call and changes nothing.
-- Returns {ttl_ms, partition, epoch, partition, epoch, ...} for the leases renewed.
-- HMGET and HSET take at most 1,000 partitions each (Lua's unpack limit is about 8,000
-- values), so a call of many partitions reads and writes in chunks, all in this one script.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local owner = ARGV[1]
local ttl = tonumber(ARGV[2])
local until_ms = string.format('%d', now + ttl)
local chunk = 1000
local seen = {}
local writes = {}
local out = {ttl}
local i = 3
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
          writes[#writes + 1] = e .. ' ' .. until_ms .. ' ' .. owner
          out[#out + 1] = tonumber(fields[k])
          out[#out + 1] = tonumber(e)
        end
      end
    end
  end
  i = last + 1
end
for w = 1, #writes, 2 * chunk do
  redis.call('HSET', KEYS[1], unpack(writes, w, math.min(w + 2 * chunk - 1, #writes)))
end
return out
