-- A fenced write: KEYS[1] is the fence key, ARGV[1] the offered token (decimal, no leading
-- zeros), ARGV[2] 1 to compare (0: the check left out, tests only), ARGV[3] the command's name
-- and ARGV[4..] its arguments; without ARGV[3], the check and the raise alone (no command).
--
-- Tokens are compared as decimal strings (length, then bytes), never as Lua numbers: a Lua
-- number is a double, exact only up to 2^53, and a fence must order every u64.
local offered = ARGV[1]
local fence = redis.call('GET', KEYS[1])
if fence then
  if not string.match(fence, '^[1-9][0-9]*$') then
    return redis.error_reply('LEASEFENCECORRUPT the fence key holds ' .. string.sub(fence, 1, 40))
  end
  local lower = #offered < #fence or (#offered == #fence and offered < fence)
  if lower and ARGV[2] == '1' then
    return {0, fence}
  end
end
local reply = 'OK'
if #ARGV >= 3 then
  reply = redis.pcall(unpack(ARGV, 3))
  if type(reply) == 'table' and reply.err then
    -- The write failed: the fence is left as it was.
    return reply
  end
end
if fence ~= offered then
  redis.call('SET', KEYS[1], offered)
end
return {1, reply}
