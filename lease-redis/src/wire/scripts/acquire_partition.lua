-- acquire_partition: KEYS[1] = the group's partition leases (a hash: one field per partition,
-- the decimal partition number, whose value is '<epoch> <expires_at_ms> <owner>').
-- ARGV[1] = partition number (decimal), ARGV[2] = owner, ARGV[3] = ttl in ms,
-- ARGV[4] = '1' to floor the epoch at the server's clock in microseconds, '0' otherwise.
-- Admits a lease that is free (never seen, released or expired by the server's clock) or live
-- under ARGV[2]. The epoch is kept when ARGV[2] holds it live and goes up otherwise (the first
-- is 1, or the clock floor); the expiry becomes now + ttl either way. The record of every other
-- partition is untouched.
-- Returns {epoch, ttl_ms}, or nil when another owner holds the lease live.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local v = redis.call('HGET', KEYS[1], ARGV[1])
local epoch, exp, owner = 0, 0, nil
local moved = false
if v then
  local e, x, o = string.match(v, '^(%d+) (%d+) (.*)$')
  if not e then
    return redis.error_reply('LEASECORRUPT the partition ' .. ARGV[1] .. ' of ' .. KEYS[1] .. ' is not "<epoch> <expires_at_ms> <owner>"')
  end
  epoch, exp, owner = tonumber(e), tonumber(x), o
end
if exp > now then
  if owner ~= ARGV[2] then
    return nil
  end
else
  epoch = next_term(epoch, t, ARGV[4])
  moved = true
end
local ttl = tonumber(ARGV[3])
redis.call('HSET', KEYS[1], ARGV[1], string.format('%d %d %s', epoch, now + ttl, ARGV[2]))
if moved then
  changed('group')
end
return {epoch, ttl}
