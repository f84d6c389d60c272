-- Adjust a request's state after the fact: refund or charge token buckets, move budget
-- reservations to the real cost, free leases. Used to settle a request, to roll back an
-- admission that another cluster slot refused, and to release leases.
--
-- KEYS: the bucket keys, then the budget keys, then the lease keys, then (when "m" > 0)
-- a marker key that makes the adjustment happen at most once.
-- ARGV[1]: JSON {"m": marker ttl s or 0,
--   "b": [[capacity, refill per second, delta tokens], ...],
--   "g": [[field, delta micro-USD], ...],
--   "l": [lease member, ...]}
-- Returns 1, or 0 when the marker shows it was already done.
local spec = cjson.decode(ARGV[1])
local buckets, budgets, members = spec.b, spec.g, spec.l
local nb, ng, nl = #buckets, #budgets, #members
local MARGIN_MS = 10000

if spec.m > 0 then
  if not redis.call('SET', KEYS[nb + ng + nl + 1], '1', 'NX', 'EX', spec.m) then return 0 end
end

local clock = redis.call('TIME')
local now_us = tonumber(clock[1]) * 1000000 + tonumber(clock[2])

for i = 1, nb do
  local capacity, rate, delta = buckets[i][1], buckets[i][2], buckets[i][3]
  local state = redis.call('HMGET', KEYS[i], 't', 'ts')
  local tokens = capacity
  if state[1] then
    local elapsed = math.max(0, now_us - tonumber(state[2])) / 1000000
    tokens = math.min(capacity, tonumber(state[1]) + elapsed * rate)
  end
  -- usage above the reservation is owed (the bucket may go below zero), but never more
  -- than one full bucket, so one runaway reply cannot lock a key out for long
  local left = math.max(-capacity, math.min(capacity, tokens - delta))
  redis.call('HSET', KEYS[i], 't', string.format('%.17g', left), 'ts', string.format('%.0f', now_us))
  redis.call('PEXPIRE', KEYS[i], math.ceil((capacity - left) / rate * 1000) + MARGIN_MS)
end

for k = 1, ng do
  local key, field, delta = KEYS[nb + k], budgets[k][1], budgets[k][2]
  -- a reservation whose period or window has passed is gone; nothing left to correct
  if redis.call('HEXISTS', key, field) == 1 then
    if redis.call('HINCRBY', key, field, string.format('%.0f', delta)) < 0 then
      redis.call('HSET', key, field, 0)
    end
  end
end

for j = 1, nl do
  redis.call('ZREM', KEYS[nb + ng + j], members[j])
end
return 1
