-- Revoked key records that a gateway from before the revoked table left among the live
-- ones move to the revoked table, verbatim (the same JSON, so a compare-and-set decided
-- on either place still sees the record unchanged).
-- KEYS: keys, revoked (hashes, one hash tag). Returns how many moved.
-- No version bump: every process already leaves revoked records out of its copy.
local flat = redis.call('HGETALL', KEYS[1])
local moved = 0
for i = 1, #flat, 2 do
  local ok, record = pcall(cjson.decode, flat[i + 1])
  if ok and type(record) == 'table' and type(record.revoked_at) == 'number' then
    redis.call('HSET', KEYS[2], flat[i], flat[i + 1])
    redis.call('HDEL', KEYS[1], flat[i])
    moved = moved + 1
  end
end
return moved
