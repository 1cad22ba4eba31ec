-- permit.lua: joined in front of every permit script (claim_permit, renew_permit,
-- release_permit, verify_permit, permits) when the crate is built, so that the record's form is
-- written once. KEYS[1] is the name's permits, a hash: the field 'term' holds the greatest term
-- issued for the name across its permits, and one field per permit, its index in decimal, holds
-- '<term> <expires_at_ms> <holder> <instance>' (expiry in server time, Unix milliseconds).
-- permit(field, value): the record {index, term, exp, holder, instance}; a field or value of
-- another form raises LEASECORRUPT.
local function permit(field, v)
  local term, exp, holder, instance = string.match(v, '^(%d+) (%d+) (%x+) (.*)$')
  if not term or not string.match(field, '^%d+$') then
    error(redis.error_reply('LEASECORRUPT the field ' .. field .. ' of ' .. KEYS[1] .. ' is not a permit "<term> <expires_at_ms> <holder> <instance>"'))
  end
  return {index = tonumber(field), term = tonumber(term), exp = tonumber(exp), holder = holder, instance = instance}
end
-- permit_value(term, exp, holder, instance): the value of a permit's field.
local function permit_value(term, exp, holder, instance)
  return string.format('%d %d %s %s', term, exp, holder, instance)
end
