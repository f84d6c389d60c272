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
--   then each request's id, its buckets' takes, then its budgets' reservations
--     (micro-USD).
-- Returns one JSON array per request: [ok, never, kind ("b"/"l"/"g"/""), index (0-based
--   within kind), retry (seconds, -1 if none), [tokens left, ...], [[used micro-USD,
--   field], ...], [lease set size, ...]]; tokens as written ('%.17g'); a set's size
--   counts expired members not yet reclaimed. (A JSON string built with `..` costs the
--   server about what a RESP array of the same items does, and the gateway decodes it
--   several times faster.)
--
-- Every redis.call costs the server about a microsecond on top of the command, so the
-- state is read once for the batch and written once after it: a batch of n requests of
-- one key costs about what one request did. Numbers written are formatted with '%d'
-- where they are whole (libc's integer path; '%.17g' and redis.call's own conversion of
-- a number take the floating-point one, several times slower) and constants are sent
-- as the strings Redis is given.
-- globals read once: each use of one is a table lookup
local call, KEYS, ARGV, tostring, unpack = redis.call, KEYS, ARGV, tostring, unpack
local ceil, format = math.ceil, string.format
-- (a string's `+ 0` reads it as tonumber does, with one strtod where tonumber has two)
local nb, nl, ng = ARGV[1] + 0, ARGV[2] + 0, ARGV[3] + 0
-- where each kind's constants start in ARGV: bucket i's capacity and rate at B + 2i - 1
-- and B + 2i, lease j's limit and TTL at L + 2j - 1 and L + 2j, budget k's limit, period
-- end, window and expiry at G + 4k - 3 ... G + 4k
local B = 3
local L = B + 2 * nb
local G = L + 2 * nl
local HEAD = G + 4 * ng
local stride = 1 + nb + ng
local n = (#ARGV - HEAD) / stride

-- Every table costs the server ~1,200 instructions to make and collect, more each time it
-- grows: so the constants and the state of the batch are one table, S, made in one
-- allocation ({unpack(t, 1, size)} is a table of `size` slots). S[1 ... HEAD] is ARGV's
-- head with the numbers used more than once read as numbers (C is S, read as that);
-- then S[T + i]: bucket i's tokens now; S[TX + i]: the last request's answer's text of
-- them (what is written, when taken); S[H + j]: lease set j's size as this batch counts
-- it; S[HB + j]: its size before the batch; S[W + j]: how many of `members` it was sent;
-- S[U + k]: budget k's spend now; S[UB + k]: before the batch; S[R + k]: this batch's
-- reservations; S[F + k]: the field they go to; S[A + x]: the request's amounts (its
-- buckets' takes, then its budgets' reservations)
local T = HEAD
local TX = T + nb
local H = TX + nb
local HB = H + nl
local W = HB + nl
local U = W + nl
local UB = U + ng
local R = UB + ng
local F = R + ng
local A = F + ng
local S = {unpack(ARGV, 1, A + nb + ng)}
local C = S
for x = B + 1, L do C[x] = C[x] + 0 end
for j = 1, nl do C[L + 2 * j - 1] = C[L + 2 * j - 1] + 0 end
-- (a budget's period end is read only for a refusal, its expiry only sent back)
for k = 1, ng do
  local at = G + 4 * k
  C[at - 3], C[at - 1] = C[at - 3] + 0, C[at - 1] + 0
end

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
local WHOLE = 2 ^ 53

-- a number as '%.17g' writes it, through libc's integer path when it is whole
local function exact(x)
  if x % 1 == 0 and x < WHOLE and x > -WHOLE then return format('%d', x) end
  return format('%.17g', x)
end

-- each bucket's tokens now, refilled on the server's clock
for i = 1, nb do
  local capacity = C[B + 2 * i - 1]
  local state = call('HMGET', KEYS[i], 't', 'ts')
  local tokens = capacity
  if state[1] then
    -- (math.max and math.min inline: a C function call costs more than the comparison)
    local elapsed = now_us - state[2]
    if not (elapsed > 0) then elapsed = 0 end
    tokens = state[1] + elapsed / 1000000 * C[B + 2 * i]
    if not (tokens < capacity) then tokens = capacity end
  end
  S[T + i] = tokens
end

-- each lease set's size as this batch counts it. A request admitted holds every lease of
-- the scope, so the batch's admitted ids (`members`, in order; `seen`, as a set, only
-- when the batch has more than one request) are the same for every set; each set is
-- sent the ones it has not been (a member held already counts once, so at the limit the
-- count is taken afresh from Redis after sending them).
local members, seen = nil, nil
for j = 1, nl do
  local held = call('ZCARD', KEYS[nb + j])
  S[H + j], S[HB + j], S[W + j] = held, held, 0
end
local function write_leases(j)
  local from, to = S[W + j] + 1, members and #members or 0
  if from > to then return end
  -- scores are whole milliseconds below 2^53
  local score = format('%d', now_ms + C[L + 2 * j])
  if from == to then
    call('ZADD', KEYS[nb + j], score, members[from])
  else
    local args = {}
    for m = from, to do
      args[#args + 1] = score
      args[#args + 1] = members[m]
    end
    call('ZADD', KEYS[nb + j], unpack(args))
  end
  S[W + j] = to
end

-- each budget's spend, with this batch's reservations added as they are made; a rolling
-- budget's live slots ({at, spent}, in `live[k]`) for the wait of a refusal
local live = nil
for k = 1, ng do
  local key = KEYS[nb + nl + k]
  local window = C[G + 4 * k - 1]
  local used = 0
  if window > 0 then
    -- a rolling window is counted in 60 slots; the oldest slot counts whole, so the sum
    -- errs on the side of the budget
    local slot = math.max(1, math.ceil(window / 60))
    local slots = math.ceil(window / slot)
    local current = math.floor(now_s / slot)
    local entries = call('HGETALL', key)
    live = live or {}
    local slots_live = {}
    live[k] = slots_live
    for e = 1, #entries, 2 do
      local at, spent = entries[e] + 0, entries[e + 1] + 0
      if at <= current - slots then
        call('HDEL', key, entries[e])
      else
        used = used + spent
        slots_live[#slots_live + 1] = {at, spent}
      end
    end
    S[F + k] = format('%d', current)
  else
    used = (call('HGET', key, 'spent') or 0) + 0
    S[F + k] = 'spent'
  end
  S[U + k], S[UB + k], S[R + k] = used, used, 0
end

-- seconds until a rolling budget has `excess` micro-USD less spend in its window (a
-- function made only for a scope with a rolling budget: making one costs ~600
-- instructions)
local window_wait = live and function(k, excess)
  local window = C[G + 4 * k - 1]
  local slot = math.max(1, math.ceil(window / 60))
  local slots = math.ceil(window / slot)
  local entries = {}
  for e = 1, #live[k] do entries[e] = live[k][e] end
  if S[R + k] > 0 then
    entries[#entries + 1] = {math.floor(now_s / slot), S[R + k]}
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
-- (ranked: a budget 2, a bucket or lease 1, none 0)
local ok, never, kind, index, retry
local function refuse(k, i, wait, is_never)
  ok = false
  if is_never then
    if not never then never, kind, index = true, k, i end
    return
  end
  if wait > retry then retry = wait end
  if never then return end
  if kind == '' or (k == 'g' and kind ~= 'g') then kind, index = k, i end
end

local answers, any_taken = {}, false
for r = 1, n do
  local base = HEAD + (r - 1) * stride
  local id = ARGV[base + 1]
  ok, never, kind, index, retry = true, false, '', 0, -1

  for i = 1, nb do
    local capacity, tokens = C[B + 2 * i - 1], S[T + i]
    local amount = ARGV[base + 1 + i] + 0
    S[A + i] = amount
    if amount > capacity then
      refuse('b', i, 0, true)
    elseif tokens < amount then
      refuse('b', i, (amount - tokens) / C[B + 2 * i], false)
    end
  end

  -- a lease set holds at most `limit` members: expired ones are reclaimed when the set is
  -- full, which is the only time they could change the answer
  local in_batch = seen ~= nil and seen[id]
  for j = 1, nl do
    local key, limit = KEYS[nb + j], C[L + 2 * j - 1]
    if S[H + j] >= limit and not in_batch then
      write_leases(j)
      local held = call('ZCARD', key)
      if held >= limit then
        local score = call('ZSCORE', key, id)
        if not (score and tonumber(score) > now_ms) then
          held = held - call('ZREMRANGEBYSCORE', key, '-inf', now_ms)
          if held >= limit then
            local first = call('ZRANGE', key, 0, 0, 'WITHSCORES')
            local wait = math.min(1, math.max(0.001, (tonumber(first[2]) - now_ms) / 1000))
            refuse('l', j, wait, false)
          end
        end
      end
      S[H + j] = held
    end
  end

  for k = 1, ng do
    local at = G + 4 * k
    local limit, period_end, window = C[at - 3], C[at - 2], C[at - 1]
    local amount = ARGV[base + 1 + nb + k] + 0
    S[A + nb + k] = amount
    local used = S[U + k]
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
    for i = 1, nb do S[T + i] = S[T + i] - S[A + i] end
    if nl > 0 and not in_batch then
      members = members or {}
      members[#members + 1] = id
      if n > 1 then
        seen = seen or {}
        seen[id] = true
      end
      for j = 1, nl do S[H + j] = S[H + j] + 1 end
    end
    for k = 1, ng do
      local amount = S[A + nb + k]
      S[U + k] = S[U + k] + amount
      S[R + k] = S[R + k] + amount
    end
  end

  -- (one `..` chain is one concatenation; its numbers formatted beforehand)
  local left, states, held = '', '', ''
  for i = 1, nb do
    local text = exact(S[T + i])
    S[TX + i] = text
    left = left .. (i > 1 and ',' or '') .. text
  end
  for k = 1, ng do
    states = states .. (k > 1 and ',[' or '[') .. format('%d', S[U + k]) .. ',"'
      .. S[F + k] .. '"]'
  end
  for j = 1, nl do held = held .. (j > 1 and ',' or '') .. format('%d', S[H + j]) end
  answers[r] = (ok and '[true,' or '[false,') .. (never and 'true,"' or 'false,"') .. kind
    .. '",' .. (index > 1 and format('%d', index - 1) or '0') .. ','
    .. (retry == -1 and '-1' or (retry % 1 == 0 and retry < WHOLE and format('%d', retry)
      or tostring(retry)))
    .. ',[' .. left .. '],[' .. states .. '],[' .. held .. ']]'
end

if any_taken then
  -- TIME's seconds and microseconds make the stamp: now_us's digits, no formatting
  local stamp = clock[1] .. string.sub('00000' .. clock[2], -6)
  for i = 1, nb do
    local left = S[T + i]
    -- (the last answer's text of the tokens is what is written)
    call('HSET', KEYS[i], 't', S[TX + i], 'ts', stamp)
    call('PEXPIRE', KEYS[i],
      format('%d', ceil((C[B + 2 * i - 1] - left) / C[B + 2 * i] * 1000) + MARGIN_MS))
  end
  -- (a request admitted holds every lease of the scope: each set was written to)
  for j = 1, nl do
    write_leases(j)
    local key, ttl_arg = KEYS[nb + j], ARGV[L + 2 * j]
    if S[HB + j] == 0 then
      -- the set did not exist: its TTL is this lease's
      call('PEXPIRE', key, ttl_arg)
    elseif EXPIRE_GT then
      -- every lease set got a TTL when it was created; only ever extend it
      call('PEXPIRE', key, ttl_arg, 'GT')
    elseif call('PTTL', key) < C[L + 2 * j] + 0 then
      call('PEXPIRE', key, ttl_arg)
    end
  end
  for k = 1, ng do
    local key, at = KEYS[nb + nl + k], G + 4 * k
    -- one request's reservation is its own argument, as sent
    local amount = n == 1 and ARGV[HEAD + 1 + nb + k] or format('%d', S[R + k])
    call('HINCRBY', key, S[F + k], amount)
    if C[at - 1] > 0 then
      call('EXPIRE', key, ARGV[at])
    elseif S[UB + k] == 0 then
      -- a calendar budget's key gets its end when its first spend creates it
      call('EXPIREAT', key, ARGV[at])
    end
  end
end

return answers
