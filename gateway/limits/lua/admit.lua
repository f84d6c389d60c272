-- Check and take every token bucket, concurrency lease and budget of one request: all of
-- them or none. Time is the Redis server's, so every gateway replica shares one clock.
--
-- KEYS: the bucket keys, then the lease keys, then the budget keys.
-- ARGV[1]: JSON of what is the same for every request of one scope (the gateway keeps it)
--   {"b": [[capacity, refill per second], ...],
--    "l": [[limit, ttl ms], ...],
--    "g": [[limit micro-USD, period end (unix s) or 0, window s or 0], ...]}
-- ARGV[2]: the request id.
-- ARGV[3...]: each bucket's take, then each budget's reservation (micro-USD).
-- Returns a JSON array [ok, never, kind ("b"/"l"/"g"/""), index (0-based within kind),
--   retry (seconds, -1 if none), [tokens left, ...], [[used micro-USD, field], ...]].
--
-- Every redis.call costs the server about a microsecond on top of the command: the
-- checks read only what decides, and writes skip what is already so.
local spec = cjson.decode(ARGV[1])
local buckets, leases, budgets = spec.b, spec.l, spec.g
local nb, nl, ng = #buckets, #leases, #budgets
local id = ARGV[2]

local clock = redis.call('TIME')
local now_us = tonumber(clock[1]) * 1000000 + tonumber(clock[2])
local now_ms = math.floor(now_us / 1000)
local now_s = now_us / 1000000
-- idle keys outlive a full refill by this much, so a late reader still finds them full
local MARGIN_MS = 10000
-- calendar budgets stay readable this long after their period ends
local PERIOD_GRACE_S = 3600
-- PEXPIRE ... GT (Redis 7): one call instead of PTTL and PEXPIRE
local EXPIRE_GT = (redis.REDIS_VERSION_NUM or 0) >= 0x070000

local ok, never = true, false
local kind, index, retry = '', 0, -1
local function rank(k) if k == 'g' then return 2 elseif k == '' then return 0 end return 1 end

-- the refusal reported is the one the caller must hear: a request that can never fit,
-- else an exhausted budget, else the limit that frees up last
local function refuse(k, i, wait, is_never)
  ok = false
  if is_never then
    if not never then never, kind, index = true, k, i end
    return
  end
  if wait > retry then retry = wait end
  if never then return end
  if rank(k) > rank(kind) then kind, index = k, i end
end

local tokens_now, amounts = {}, {}
for i = 1, nb do
  local capacity, rate = buckets[i][1], buckets[i][2]
  local amount = tonumber(ARGV[2 + i])
  amounts[i] = amount
  local state = redis.call('HMGET', KEYS[i], 't', 'ts')
  local tokens = capacity
  if state[1] then
    local elapsed = math.max(0, now_us - tonumber(state[2])) / 1000000
    tokens = math.min(capacity, tonumber(state[1]) + elapsed * rate)
  end
  tokens_now[i] = tokens
  if amount > capacity then
    refuse('b', i, 0, true)
  elseif tokens < amount then
    refuse('b', i, (amount - tokens) / rate, false)
  end
end

-- a lease set holds at most `limit` members: expired ones are reclaimed when the set is
-- full, which is the only time they could change the answer
local lease_held = {}
for j = 1, nl do
  local key, limit = KEYS[nb + j], leases[j][1]
  local held = redis.call('ZCARD', key)
  if held >= limit then
    local score = redis.call('ZSCORE', key, id)
    if not (score and tonumber(score) > now_ms) then
      held = held - redis.call('ZREMRANGEBYSCORE', key, '-inf', now_ms)
      if held >= limit then
        local first = redis.call('ZRANGE', key, 0, 0, 'WITHSCORES')
        local wait = math.min(1, math.max(0.001, (tonumber(first[2]) - now_ms) / 1000))
        refuse('l', j, wait, false)
      end
    end
  end
  lease_held[j] = held
end

local used_now, fields = {}, {}
for k = 1, ng do
  local key = KEYS[nb + nl + k]
  local limit, period_end, window = budgets[k][1], budgets[k][2], budgets[k][3]
  local amount = tonumber(ARGV[2 + nb + k])
  amounts[nb + k] = amount
  local used, wait = 0, nil
  if window > 0 then
    -- a rolling window is counted in 60 slots; the oldest slot counts whole, so the sum
    -- errs on the side of the budget
    local slot = math.max(1, math.ceil(window / 60))
    local slots = math.ceil(window / slot)
    local current = math.floor(now_s / slot)
    local live = {}
    local entries = redis.call('HGETALL', key)
    for e = 1, #entries, 2 do
      local at, spent = tonumber(entries[e]), tonumber(entries[e + 1])
      if at <= current - slots then
        redis.call('HDEL', key, entries[e])
      else
        used = used + spent
        live[#live + 1] = {at, spent}
      end
    end
    fields[k] = string.format('%d', current)
    if used + amount > limit then
      table.sort(live, function(a, b) return a[1] < b[1] end)
      local excess = used + amount - limit
      wait = window
      for _, entry in ipairs(live) do
        excess = excess - entry[2]
        if excess <= 0 then
          wait = math.max(0, (entry[1] + slots) * slot - now_s)
          break
        end
      end
    end
  else
    used = tonumber(redis.call('HGET', key, 'spent') or '0')
    fields[k] = 'spent'
    if used + amount > limit then wait = math.max(0, period_end - now_s) end
  end
  used_now[k] = used
  if amount > limit then
    refuse('g', k, 0, true)
  elseif wait then
    refuse('g', k, wait, false)
  end
end

if ok then
  local stamp = string.format('%.0f', now_us)
  for i = 1, nb do
    local capacity, rate = buckets[i][1], buckets[i][2]
    local left = tokens_now[i] - amounts[i]
    tokens_now[i] = left
    redis.call('HSET', KEYS[i], 't', string.format('%.17g', left), 'ts', stamp)
    redis.call('PEXPIRE', KEYS[i], math.ceil((capacity - left) / rate * 1000) + MARGIN_MS)
  end
  for j = 1, nl do
    local key, ttl_ms = KEYS[nb + j], leases[j][2]
    -- scores and TTLs are whole milliseconds below 2^53: exact as Lua numbers
    redis.call('ZADD', key, now_ms + ttl_ms, id)
    if lease_held[j] == 0 then
      -- the set did not exist: its TTL is this lease's
      redis.call('PEXPIRE', key, ttl_ms)
    elseif EXPIRE_GT then
      -- every lease set got a TTL when it was created; only ever extend it
      redis.call('PEXPIRE', key, ttl_ms, 'GT')
    elseif redis.call('PTTL', key) < ttl_ms then
      redis.call('PEXPIRE', key, ttl_ms)
    end
  end
  for k = 1, ng do
    local key, amount = KEYS[nb + nl + k], amounts[nb + k]
    local period_end, window = budgets[k][2], budgets[k][3]
    redis.call('HINCRBY', key, fields[k], string.format('%.0f', amount))
    if window > 0 then
      redis.call('EXPIRE', key, window + math.max(1, math.ceil(window / 60)))
    elseif used_now[k] == 0 then
      -- a calendar budget's key gets its end when its first spend creates it
      redis.call('EXPIREAT', key, period_end + PERIOD_GRACE_S)
    end
    used_now[k] = used_now[k] + amount
  end
end

local left, states = {}, {}
for i = 1, nb do left[i] = tostring(tokens_now[i]) end
for k = 1, ng do states[k] = string.format('[%d,"%s"]', used_now[k], fields[k]) end
return string.format('[%s,%s,"%s",%d,%s,[%s],[%s]]',
  tostring(ok), tostring(never), kind, math.max(0, index - 1), tostring(retry),
  table.concat(left, ','), table.concat(states, ','))
