-- notify.lua: joined in front of every script that can change hands (claim, release,
-- force_release, acquire_partition, release_partitions, claim_slot, finish_slot, claim_rerun,
-- claim_permit, release_permit) when the crate is built, so that the hint is written once.
-- changed(kind): publishes '<kind> <KEYS[1]>' on '<prefix>changes', the prefix being what
-- precedes the key's first '{' (a prefix holds no braces; keys.rs names the same channel).
-- A hint only: nothing is decided by it, and with nobody subscribed it costs microseconds.
-- `pcall`, not `call`: it runs after the script's write, which Redis keeps when a script
-- fails, so a refused PUBLISH (a user without channel rights: Redis 7's default for new ACL
-- users) must not fail a claim or a release that took effect. Hints are then lost: the
-- store's start-up check publishes once itself to find that out, warns, and says its hints
-- are disconnected (store.rs `publish_check`).
local function changed(kind)
  local key = KEYS[1]
  local open = string.find(key, '{', 1, true) or 1
  redis.pcall('PUBLISH', string.sub(key, 1, open - 1) .. 'changes', kind .. ' ' .. key)
end
