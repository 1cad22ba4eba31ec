-- permits: KEYS[1] = the name's permits (see permit.lua). Writes nothing.
-- Returns {{permit, instance, term, live (1/0), remaining_ms}, ...} for every permit record,
-- live or not by the server's clock, in no particular order.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local all = redis.call('HGETALL', KEYS[1])
local out = {}
for i = 1, #all, 2 do
  if all[i] ~= 'term' then
    local p = permit(all[i], all[i + 1])
    if p.exp > now then
      out[#out + 1] = {p.index, p.instance, p.term, 1, p.exp - now}
    else
      out[#out + 1] = {p.index, p.instance, p.term, 0, 0}
    end
  end
end
return out
