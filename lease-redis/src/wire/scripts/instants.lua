-- instants.lua: joined in front of the scripts that compare slot instants (claim_slot,
-- finish_slot) when the crate is built, so that the comparison is written once.
-- cmp(a, b): -1, 0 or 1 as the instant `a` is before, at or after `b`. Instants are decimal
-- strings of i64 milliseconds (no leading zeros, '-' for negatives), compared as strings so that
-- every i64 stays exact (a Lua number holds 53 bits).
local function cmp(a, b)
  local na, nb = a:sub(1, 1) == '-', b:sub(1, 1) == '-'
  if na ~= nb then
    return na and -1 or 1
  end
  if a == b then
    return 0
  end
  local r
  if #a ~= #b then
    r = (#a < #b) and -1 or 1
  else
    r = (a < b) and -1 or 1
  end
  return na and -r or r
end
