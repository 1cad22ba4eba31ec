-- verify_permit: KEYS[1] = the name's permits (see permit.lua). ARGV[1] = holder token (hex).
-- Returns {permit, term, remaining_ms} for the permit live by the server's clock under ARGV[1],
-- nil when it holds none. Writes nothing.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local all = redis.call('HGETALL', KEYS[1])
for i = 1, #all, 2 do
  if all[i] ~= 'term' then
    local p = permit(all[i], all[i + 1])
    if p.exp > now and p.holder == ARGV[1] then
      return {p.index, p.term, p.exp - now}
    end
  end
end
return nil
