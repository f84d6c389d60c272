-- Adjust requests' state after the fact: refund or charge token buckets, move budget
-- reservations to the real cost, free leases. Used to settle requests, to roll back an
-- admission that another cluster slot refused, and to release leases. A batch of
-- adjustments of the same keys is applied in order, each as if alone, with the keys read
-- once and written once.
--
-- KEYS: the bucket keys, then the budget keys, then the lease keys (the same for every
-- adjustment of the batch), then one marker key per adjustment; a marker makes its
-- adjustment happen at most once (when its "m" > 0).
-- ARGV[1...]: one JSON per adjustment {"m": marker ttl s or 0,
--   "b": [[capacity, refill per second, delta tokens], ...],
--   "g": [[field, delta micro-USD], ...],
--   "l": [lease member, ...]}
-- Returns one number per adjustment: 1, or 0 when its marker shows it was already done.
local n = #ARGV
local first = cjson.decode(ARGV[1])
local nb, ng, nl = #first.b, #first.g, #first.l
local markers = nb + ng + nl
local MARGIN_MS = 10000

local now_us = nil
local tokens, bucket_specs = {}, {}
-- budget fields as read, then as adjusted (false: the field is gone)
local values = {}
for k = 1, ng do values[k] = {} end
local members = {}
for j = 1, nl do members[j] = {} end

local done = {}
for r = 1, n do
  local spec = r == 1 and first or cjson.decode(ARGV[r])
  if spec.m > 0 and not redis.call('SET', KEYS[markers + r], '1', 'NX', 'EX', spec.m) then
    done[r] = 0
  else
    done[r] = 1
    if now_us == nil then
      local clock = redis.call('TIME')
      now_us = tonumber(clock[1]) * 1000000 + tonumber(clock[2])
    end
    for i = 1, nb do
      local capacity, rate, delta = spec.b[i][1], spec.b[i][2], spec.b[i][3]
      local left = tokens[i]
      if left == nil then
        local state = redis.call('HMGET', KEYS[i], 't', 'ts')
        left = capacity
        if state[1] then
          local elapsed = math.max(0, now_us - tonumber(state[2])) / 1000000
          left = math.min(capacity, tonumber(state[1]) + elapsed * rate)
        end
      end
      -- usage above the reservation is owed (the bucket may go below zero), but never
      -- more than one full bucket, so one runaway reply cannot lock a key out for long
      tokens[i] = math.max(-capacity, math.min(capacity, left - delta))
      bucket_specs[i] = spec.b[i]
    end
    for k = 1, ng do
      local field, delta = spec.g[k][1], spec.g[k][2]
      local value = values[k][field]
      if value == nil then
        value = tonumber(redis.call('HGET', KEYS[nb + k], field) or '') or false
      end
      -- a reservation whose period or window has passed is gone; nothing to correct
      if value then value = math.max(0, value + delta) end
      values[k][field] = value
    end
    for j = 1, nl do
      local list = members[j]
      list[#list + 1] = spec.l[j]
    end
  end
end

if now_us ~= nil then
  local stamp = string.format('%.0f', now_us)
  for i = 1, nb do
    local capacity, rate = bucket_specs[i][1], bucket_specs[i][2]
    local left = tokens[i]
    redis.call('HSET', KEYS[i], 't', string.format('%.17g', left), 'ts', stamp)
    redis.call('PEXPIRE', KEYS[i], math.ceil((capacity - left) / rate * 1000) + MARGIN_MS)
  end
  for k = 1, ng do
    for field, value in pairs(values[k]) do
      if value then redis.call('HSET', KEYS[nb + k], field, string.format('%.0f', value)) end
    end
  end
  for j = 1, nl do
    local list = members[j]
    -- (unpack has a stack limit; a batch is far below it, but stay safe)
    for start = 1, #list, 1000 do
      redis.call('ZREM', KEYS[nb + ng + j], unpack(list, start, math.min(#list, start + 999)))
    end
  end
end
return done
