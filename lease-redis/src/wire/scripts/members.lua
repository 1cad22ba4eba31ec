-- members: KEYS[1] = the service's member records, KEYS[2] = their expiries (see
-- heartbeat.lua). Writes nothing.
-- Returns {{node, remaining_ms, '<address>\n<groups>'}, ...} for every member whose expiry is
-- later than now by the server's clock, in no particular order.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local live = redis.call('ZRANGEBYSCORE', KEYS[2], '(' .. string.format('%d', now), '+inf', 'WITHSCORES')
local out = {}
local chunk = 1000
local i = 1
while i <= #live do
  local last = math.min(i + 2 * chunk - 1, #live)
  local nodes = {}
  for j = i, last, 2 do
    nodes[#nodes + 1] = live[j]
  end
  local vals = redis.call('HMGET', KEYS[1], unpack(nodes))
  for k = 1, #nodes do
    if vals[k] then
      out[#out + 1] = {nodes[k], tonumber(live[i + 2 * k - 1]) - now, vals[k]}
    end
  end
  i = last + 1
end
return out
