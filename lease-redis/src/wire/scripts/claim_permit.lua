-- claim_permit: KEYS[1] = the name's permits (a hash; see permit.lua).
-- ARGV[1] = the permit count N, ARGV[2] = holder token (hex), ARGV[3] = instance label,
-- ARGV[4] = ttl in ms, ARGV[5] = '1' to floor the term at the server's clock in microseconds,
-- '0' otherwise.
-- Counts the permits live by the server's clock. When fewer than N are live and none of them is
-- held under ARGV[2], takes the lowest permit below N that is not live, with a term one more
-- than the greatest issued for the name (the 'term' field, or a permit's term should it be
-- greater), and raises 'term' to it. Counting and taking are one script: nothing runs between.
-- Returns {permit, term, ttl_ms}, or nil when N permits are live or ARGV[2] holds one live.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local all = redis.call('HGETALL', KEYS[1])
local top, count, live = 0, 0, {}
for i = 1, #all, 2 do
  if all[i] == 'term' then
    local stored = tonumber(all[i + 1])
    if not stored then
      return redis.error_reply('LEASECORRUPT the permits ' .. KEYS[1] .. ' hold a term that is not a number')
    end
    top = math.max(top, stored)
  else
    local p = permit(all[i], all[i + 1])
    top = math.max(top, p.term)
    if p.exp > now then
      if p.holder == ARGV[2] then
        return nil
      end
      live[p.index] = true
      count = count + 1
    end
  end
end
if count >= tonumber(ARGV[1]) then
  return nil
end
-- Fewer than N are live, so one of 0 .. N-1 is free.
local index = 0
while live[index] do
  index = index + 1
end
local ttl = tonumber(ARGV[4])
local term = next_term(top, t, ARGV[5])
redis.call('HSET', KEYS[1],
  'term', string.format('%d', term),
  string.format('%d', index), permit_value(term, now + ttl, ARGV[2], ARGV[3]))
changed('permits')
return {index, term, ttl}
