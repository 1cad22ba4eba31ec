-- waited.lua: joined after notify.lua in front of the lease scripts that change hands (claim,
-- release, force_release) when the crate is built.
-- changed_if_waited(kind): changed(kind) only while a waiter's mark KEYS[2] (the name's
-- '<prefix>{<name>}:waiting', a plain key with a short TTL that the subscriber connection of
-- every store with waiters on the name keeps set: hints.rs) lives. The lease scripts (claim,
-- release, force_release) hint this way, so a claim and release nobody waits for publish
-- nothing; a hint is a hint either way (waiters also wake at the holder's expiry and poll).
local function changed_if_waited(kind)
  if redis.call('EXISTS', KEYS[2]) == 1 then
    changed(kind)
  end
end
