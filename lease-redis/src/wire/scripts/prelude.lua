-- prelude.lua: joined in front of every script that makes a term or a partition epoch (claim,
-- claim_slot, claim_rerun, acquire_partition, claim_permit) when the crate is built, so that the rule is
-- written once (see TermScheme).
-- next_term(stored, t, floor): the term (or epoch) that follows `stored` (0 when there was none):
-- stored + 1; with floor == '1' (TermScheme::ClockFloor) at least the server's clock in
-- microseconds, `t` being the reply of redis.call('TIME').
local function next_term(stored, t, floor)
  local term = stored + 1
  if floor == '1' then
    local clock = tonumber(t[1]) * 1000000 + tonumber(t[2])
    if clock > term then
      term = clock
    end
  end
  return term
end
