-- Extend held concurrency leases (a long stream keeps its slot). A lease already
-- reclaimed by someone else stays gone, and so does one past its expiry that nobody has
-- reclaimed yet (admission reclaims expired leases only when a set is full).
-- KEYS: lease keys. ARGV[1]: JSON {"m": [member, ...], "t": [ttl ms, ...]}
-- Returns how many leases were still held.
local spec = cjson.decode(ARGV[1])
local clock = redis.call('TIME')
local now_ms = math.floor((tonumber(clock[1]) * 1000000 + tonumber(clock[2])) / 1000)
local held = 0
for j = 1, #KEYS do
  local member, ttl_ms = spec.m[j], spec.t[j]
  local score = redis.call('ZSCORE', KEYS[j], member)
  if score and tonumber(score) > now_ms then
    redis.call('ZADD', KEYS[j], string.format('%.0f', now_ms + ttl_ms), member)
    if redis.call('PTTL', KEYS[j]) < ttl_ms then redis.call('PEXPIRE', KEYS[j], ttl_ms) end
    held = held + 1
  elseif score then
    redis.call('ZREM', KEYS[j], member)
  end
end
return held
