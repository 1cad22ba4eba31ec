-- renew_many: KEYS = the records of the names to renew (each its own hash tag: one server,
-- never a Redis Cluster, see renewals.rs), ARGV[1] = ttl in ms, ARGV[1 + i] = the holder token
-- (hex) the lease of the i-th key was claimed under.
-- Each name exactly as renew.lua renews one: a lease live by the server's clock and held under
-- its token is extended to ttl from now (one `now` for the whole call); an expired or released
-- lease is never revived, a lease held under another token never touched. Returns one integer
-- per key, in order: the term when renewed, 0 when the lease is not live under that token
-- (lost; terms start at 1), -1 when the record's term is not a number (written by something
-- else; nothing is written then).
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local expiry = string.format('%d', now + tonumber(ARGV[1]))
local out = {}
for i, key in ipairs(KEYS) do
  local rec = redis.call('HMGET', key, 'holder', 'term', 'expires_at_ms')
  local exp = tonumber(rec[3])
  if not exp or exp <= now or rec[1] ~= ARGV[i + 1] then
    out[i] = 0
  else
    local term = tonumber(rec[2])
    if term then
      redis.call('HSET', key, 'expires_at_ms', expiry)
      out[i] = term
    else
      out[i] = -1
    end
  end
end
return out
