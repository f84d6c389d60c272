-- Check and take every token bucket, concurrency lease and budget of each request of a
-- batch that shares one scope: for each request all of them or none, in order, each
-- request seeing what the ones before it took. Time is the Redis server's, so every
-- gateway replica shares one clock.
--
-- KEYS: the bucket keys, then the lease keys, then the budget keys.
-- ARGV: what is the same for every request of one scope (the gateway formats it once):
--   ARGV[1], [2], [3]: how many buckets (nb), leases (nl), budgets (ng);
--   then each bucket's capacity, refill per second;
--   then each lease's limit, TTL (ms);
--   then each budget's limit (micro-USD), period end (unix s) or 0, window (s) or 0, and
--     its key's expiry: EXPIREAT (period end + PERIOD_GRACE_S) for a calendar budget,
--     EXPIRE seconds (window + one slot) for a rolling one;
--   then how many requests the batch has;
--   then each request's id, its buckets' takes, then its budgets' reservations
--     (micro-USD).
-- Returns one JSON array per request: [ok, never, kind ("b"/"l"/"g"/""), index (0-based
--   within kind), retry (seconds, -1 if none), [tokens left, ...], [[used micro-USD,
--   field], ...]]. (A JSON string built with `..` costs the server about what a RESP
--   array of the same items does, and the gateway decodes it several times faster.)
--
-- Every redis.call costs the server about a microsecond on top of the command, so the
-- state is read once for the batch and written once after it: a batch of n requests of
-- one key costs about what one request did. Numbers written are formatted with '%d'
-- where they are whole (libc's integer path; '%.17g' and redis.call's own conversion of
-- a number take the floating-point one, several times slower) and constants are sent
-- as the strings Redis is given.
-- globals read once: each use of one is a table lookup
local call, KEYS, ARGV, tostring, unpack = redis.call, KEYS, ARGV, tostring, unpack
local ceil = math.ceil
-- (a string's `+ 0` reads it as tonumber does, with one strtod where tonumber has two)
local nb, nl, ng = ARGV[1] + 0, ARGV[2] + 0, ARGV[3] + 0
local a = 3
local capacities, rates = {}, {}
for i = 1, nb do
  capacities[i], rates[i] = ARGV[a + 1] + 0, ARGV[a + 2] + 0
  a = a + 2
end
local lease_limits, lease_ttls, lease_ttl_args = {}, {}, {}
for j = 1, nl do
  lease_limits[j], lease_ttl_args[j] = ARGV[a + 1] + 0, ARGV[a + 2]
  lease_ttls[j] = lease_ttl_args[j] + 0
  a = a + 2
end
local budget_limits, period_ends, windows, expiries = {}, {}, {}, {}
for k = 1, ng do
  budget_limits[k], period_ends[k] = ARGV[a + 1] + 0, ARGV[a + 2] + 0
  windows[k], expiries[k] = ARGV[a + 3] + 0, ARGV[a + 4]
  a = a + 4
end
local n = ARGV[a + 1] + 0
local first_request = a + 1
local stride = 1 + nb + ng

local clock = call('TIME')
local now_us = clock[1] * 1000000 + clock[2]
local now_ms = math.floor(now_us / 1000)
local now_s = now_us / 1000000
-- idle keys outlive a full refill by this much, so a late reader still finds them full
local MARGIN_MS = 10000
-- (calendar budgets stay readable PERIOD_GRACE_S = 3600 s after their period ends: the
-- gateway sends their expiry)
-- PEXPIRE ... GT (Redis 7): one call instead of PTTL and PEXPIRE
local EXPIRE_GT = (redis.REDIS_VERSION_NUM or 0) >= 0x070000
local format = string.format
local WHOLE = 2 ^ 53

-- a number as '%.17g' writes it, through libc's integer path when it is whole
local function exact(x)
  if x % 1 == 0 and x < WHOLE and x > -WHOLE then return format('%d', x) end
  return format('%.17g', x)
end
-- a number for the reply: whole ones with '%d', the rest as tostring writes them
local function reply_number(x)
  if x % 1 == 0 and x < WHOLE and x > -WHOLE then return format('%d', x) end
  return tostring(x)
end

-- each bucket's tokens now, refilled on the server's clock
local tokens_now = {}
for i = 1, nb do
  local capacity = capacities[i]
  local state = call('HMGET', KEYS[i], 't', 'ts')
  local tokens = capacity
  if state[1] then
    -- (math.max and math.min inline: a C function call costs more than the comparison)
    local elapsed = now_us - state[2]
    if not (elapsed > 0) then elapsed = 0 end
    tokens = state[1] + elapsed / 1000000 * rates[i]
    if not (tokens < capacity) then tokens = capacity end
  end
  tokens_now[i] = tokens
end

-- each lease set's size as this batch counts it; the members it adds wait in `unsent`
-- until written (a member held already counts once, so at the limit the count is taken
-- afresh from Redis after writing them)
local held, held_before, unsent, in_batch = {}, {}, {}, {}
for j = 1, nl do
  held[j] = call('ZCARD', KEYS[nb + j])
  held_before[j] = held[j]
  unsent[j], in_batch[j] = {}, {}
end
local function write_leases(j)
  local members = unsent[j]
  if #members == 0 then return end
  -- scores are whole milliseconds below 2^53
  local score = format('%d', now_ms + lease_ttls[j])
  local args = {}
  for m = 1, #members do
    args[2 * m - 1], args[2 * m] = score, members[m]
  end
  call('ZADD', KEYS[nb + j], unpack(args))
  unsent[j] = {}
end

-- each budget's spend, with this batch's reservations added as they are made
local used_now, used_before, fields, live, reserved = {}, {}, {}, {}, {}
for k = 1, ng do
  local key = KEYS[nb + nl + k]
  local window = windows[k]
  local used = 0
  live[k] = {}
  if window > 0 then
    -- a rolling window is counted in 60 slots; the oldest slot counts whole, so the sum
    -- errs on the side of the budget
    local slot = math.max(1, math.ceil(window / 60))
    local slots = math.ceil(window / slot)
    local current = math.floor(now_s / slot)
    local entries = call('HGETALL', key)
    for e = 1, #entries, 2 do
      local at, spent = entries[e] + 0, entries[e + 1] + 0
      if at <= current - slots then
        call('HDEL', key, entries[e])
      else
        used = used + spent
        live[k][#live[k] + 1] = {at, spent}
      end
    end
    fields[k] = format('%d', current)
  else
    used = (call('HGET', key, 'spent') or 0) + 0
    fields[k] = 'spent'
  end
  used_now[k], used_before[k], reserved[k] = used, used, 0
end

-- seconds until a rolling budget has `excess` micro-USD less spend in its window
local function window_wait(k, excess)
  local window = windows[k]
  local slot = math.max(1, math.ceil(window / 60))
  local slots = math.ceil(window / slot)
  local entries = {}
  for e = 1, #live[k] do entries[e] = live[k][e] end
  if reserved[k] > 0 then
    entries[#entries + 1] = {math.floor(now_s / slot), reserved[k]}
  end
  table.sort(entries, function(a, b) return a[1] < b[1] end)
  for _, entry in ipairs(entries) do
    excess = excess - entry[2]
    if excess <= 0 then return math.max(0, (entry[1] + slots) * slot - now_s) end
  end
  return window
end

-- one request's verdict; the refusal reported is the one the caller must hear: a
-- request that can never fit, else an exhausted budget, else the limit that frees up last
local ok, never, kind, index, retry
local function rank(k) if k == 'g' then return 2 elseif k == '' then return 0 end return 1 end
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

local answers, amounts, amount_args, any_taken = {}, {}, {}, false
for r = 1, n do
  local base = first_request + (r - 1) * stride
  local id = ARGV[base + 1]
  ok, never, kind, index, retry = true, false, '', 0, -1

  for i = 1, nb do
    local capacity, rate = capacities[i], rates[i]
    local amount = ARGV[base + 1 + i] + 0
    amounts[i] = amount
    if amount > capacity then
      refuse('b', i, 0, true)
    elseif tokens_now[i] < amount then
      refuse('b', i, (amount - tokens_now[i]) / rate, false)
    end
  end

  -- a lease set holds at most `limit` members: expired ones are reclaimed when the set is
  -- full, which is the only time they could change the answer
  for j = 1, nl do
    local key, limit = KEYS[nb + j], lease_limits[j]
    if held[j] >= limit and not in_batch[j][id] then
      write_leases(j)
      held[j] = call('ZCARD', key)
      if held[j] >= limit then
        local score = call('ZSCORE', key, id)
        if not (score and tonumber(score) > now_ms) then
          held[j] = held[j] - call('ZREMRANGEBYSCORE', key, '-inf', now_ms)
          if held[j] >= limit then
            local first = call('ZRANGE', key, 0, 0, 'WITHSCORES')
            local wait = math.min(1, math.max(0.001, (tonumber(first[2]) - now_ms) / 1000))
            refuse('l', j, wait, false)
          end
        end
      end
    end
  end

  for k = 1, ng do
    local limit, period_end, window = budget_limits[k], period_ends[k], windows[k]
    local amount_arg = ARGV[base + 1 + nb + k]
    local amount = amount_arg + 0
    amounts[nb + k], amount_args[k] = amount, amount_arg
    local used = used_now[k]
    if amount > limit then
      refuse('g', k, 0, true)
    elseif used + amount > limit then
      if window > 0 then
        refuse('g', k, window_wait(k, used + amount - limit), false)
      else
        refuse('g', k, math.max(0, period_end - now_s), false)
      end
    end
  end

  if ok then
    any_taken = true
    for i = 1, nb do tokens_now[i] = tokens_now[i] - amounts[i] end
    for j = 1, nl do
      if not in_batch[j][id] then
        in_batch[j][id] = true
        unsent[j][#unsent[j] + 1] = id
        held[j] = held[j] + 1
      end
    end
    for k = 1, ng do
      used_now[k] = used_now[k] + amounts[nb + k]
      reserved[k] = reserved[k] + amounts[nb + k]
    end
  end

  -- (one `..` chain is one concatenation; its numbers formatted beforehand)
  local left, states = '', ''
  for i = 1, nb do
    left = left .. (i > 1 and ',' or '') .. reply_number(tokens_now[i])
  end
  for k = 1, ng do
    states = states .. (k > 1 and ',[' or '[') .. format('%d', used_now[k]) .. ',"'
      .. fields[k] .. '"]'
  end
  answers[r] = (ok and '[true,' or '[false,') .. (never and 'true,"' or 'false,"') .. kind
    .. '",' .. (index > 1 and format('%d', index - 1) or '0') .. ','
    .. (retry == -1 and '-1' or reply_number(retry)) .. ',[' .. left .. '],[' .. states .. ']]'
end

if any_taken then
  -- TIME's seconds and microseconds make the stamp: now_us's digits, no formatting
  local stamp = clock[1] .. string.sub('00000' .. clock[2], -6)
  for i = 1, nb do
    local left = tokens_now[i]
    call('HSET', KEYS[i], 't', exact(left), 'ts', stamp)
    call('PEXPIRE', KEYS[i],
      format('%d', ceil((capacities[i] - left) / rates[i] * 1000) + MARGIN_MS))
  end
  -- (a request admitted holds every lease of the scope: each set was written to)
  for j = 1, nl do
    write_leases(j)
    local key, ttl_arg = KEYS[nb + j], lease_ttl_args[j]
    if held_before[j] == 0 then
      -- the set did not exist: its TTL is this lease's
      call('PEXPIRE', key, ttl_arg)
    elseif EXPIRE_GT then
      -- every lease set got a TTL when it was created; only ever extend it
      call('PEXPIRE', key, ttl_arg, 'GT')
    elseif call('PTTL', key) < lease_ttls[j] then
      call('PEXPIRE', key, ttl_arg)
    end
  end
  for k = 1, ng do
    local key = KEYS[nb + nl + k]
    -- one request's reservation is its own argument, as sent
    local amount = n == 1 and amount_args[k] or format('%d', reserved[k])
    call('HINCRBY', key, fields[k], amount)
    if windows[k] > 0 then
      call('EXPIRE', key, expiries[k])
    elseif used_before[k] == 0 then
      -- a calendar budget's key gets its end when its first spend creates it
      call('EXPIREAT', key, expiries[k])
    end
  end
end

return answers
