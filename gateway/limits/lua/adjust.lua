-- Adjust requests' state after the fact: refund or charge token buckets, move budget
-- reservations to the real cost, free leases. Used to settle requests, to roll back an
-- admission that another cluster slot refused, and to release leases. A batch of
-- adjustments of the same keys is applied in order, each as if alone, with the keys read
-- once and written once.
--
-- KEYS: the bucket keys, then the budget keys, then the lease keys (the same for every
-- adjustment of the batch), then one marker key per adjustment when markers are on; a
-- marker makes its adjustment happen at most once.
-- ARGV: what is the same for every adjustment of the batch:
--   ARGV[1], [2], [3]: how many buckets (nb), budgets (ng), leases (nl);
--   ARGV[4]: the markers' TTL (s), or 0: no markers;
--   then each bucket's capacity, refill per second;
--   then each adjustment's bucket deltas (tokens), its budgets' field and delta
--   (micro-USD), its lease members.
-- Returns one number per adjustment: 1, or 0 when its marker shows it was already done.
-- globals read once: each use of one is a table lookup
local call, KEYS, ARGV, unpack = redis.call, KEYS, ARGV, unpack
local ceil, format = math.ceil, string.format
-- (a string's `+ 0` reads it as tonumber does, with one strtod where tonumber has two)
local nb, ng, nl = ARGV[1] + 0, ARGV[2] + 0, ARGV[3] + 0
local marker_ttl = ARGV[4]
local marked = marker_ttl ~= '0'
-- bucket i's capacity and rate at ARGV[B + 2i - 1] and [B + 2i]
local B = 4
local HEAD = B + 2 * nb
local stride = nb + 2 * ng + nl
local n = 1
if stride > 0 then n = (#ARGV - HEAD) / stride end
local markers = nb + ng + nl
local MARGIN_MS = 10000
local WHOLE = 2 ^ 53

-- Every table costs the server ~1,200 instructions to make and collect, more each time it
-- grows: so the constants and the state of the batch are one table, S, made in one
-- allocation ({unpack(t, 1, size)} is a table of `size` slots), not a table per item.
-- S[1 ... HEAD] is ARGV's head with the buckets' numbers read as numbers (C is S, read
-- as that); then S[RD + i]: bucket i's tokens as read (refilled to now), or nil before
-- it is read; S[EX + i]: whether its key was there; S[TK + i]: its tokens as adjusted.
-- Budget k's first field adjusted is S[VF + k], its value as read then adjusted
-- S[VV + k] (false: the field is gone); any other field of it is in more[k][field].
local RD = HEAD
local EX = RD + nb
local TK = EX + nb
local VF = TK + nb
local VV = VF + ng
local S = {unpack(ARGV, 1, VV + ng)}
local C = S
for x = B + 1, HEAD do C[x] = C[x] + 0 end
for x = HEAD + 1, VV + ng do S[x] = nil end
local more = nil

-- a number as '%.17g' writes it, through libc's integer path when it is whole
local function exact(x)
  if x % 1 == 0 and x < WHOLE and x > -WHOLE then return format('%d', x) end
  return format('%.17g', x)
end

local clock = nil
local now_us = nil
local done, any_done, applied = {}, false, 0
for r = 1, n do
  local base = HEAD + (r - 1) * stride
  if marked and not call('SET', KEYS[markers + r], '1', 'NX', 'EX', marker_ttl) then
    done[r] = 0
  else
    done[r] = 1
    any_done = true
    applied = applied + 1
    for i = 1, nb do
      local capacity = C[B + 2 * i - 1]
      local left = S[TK + i]
      if left == nil then
        if clock == nil then
          clock = call('TIME')
          now_us = clock[1] * 1000000 + clock[2]
        end
        local state = call('HMGET', KEYS[i], 't', 'ts')
        left = capacity
        if state[1] then
          -- (math.max and math.min inline: a C function call costs more)
          local elapsed = now_us - state[2]
          if not (elapsed > 0) then elapsed = 0 end
          left = state[1] + elapsed / 1000000 * C[B + 2 * i]
          if not (left < capacity) then left = capacity end
          S[EX + i] = true
        end
        S[RD + i] = left
      end
      -- usage above the reservation is owed (the bucket may go below zero), but never
      -- more than one full bucket, so one runaway reply cannot lock a key out for long
      left = left - ARGV[base + i]
      if not (left < capacity) then left = capacity end
      if not (left > -capacity) then left = -capacity end
      S[TK + i] = left
    end
    for k = 1, ng do
      local at = base + nb + 2 * k
      local delta = ARGV[at] + 0
      -- a delta of 0 changes nothing (a field is never below 0)
      if delta ~= 0 then
        local field = ARGV[at - 1]
        local first = S[VF + k]
        local value
        if first == nil or first == field then
          value = S[VV + k]
        else
          more = more or {}
          more[k] = more[k] or {}
          value = more[k][field]
        end
        if value == nil then
          value = tonumber(call('HGET', KEYS[nb + k], field) or '') or false
        end
        -- a reservation whose period or window has passed is gone; nothing to correct
        if value then
          value = value + delta
          if not (value > 0) then value = 0 end
        end
        if first == nil or first == field then
          S[VF + k], S[VV + k] = field, value
        else
          more[k][field] = value
        end
      end
    end
  end
end

if any_done then
  if clock ~= nil then
    -- TIME's seconds and microseconds make the stamp: now_us's digits, no formatting
    local stamp = clock[1] .. string.sub('00000' .. clock[2], -6)
    for i = 1, nb do
      local left = S[TK + i]
      call('HSET', KEYS[i], 't', exact(left), 'ts', stamp)
      -- a bucket with no fewer tokens than it had needs no longer to refill than its TTL
      -- (set by the write before, for the tokens it had then) allows
      if not S[EX + i] or left < S[RD + i] then
        call('PEXPIRE', KEYS[i],
          format('%d', ceil((C[B + 2 * i - 1] - left) / C[B + 2 * i] * 1000) + MARGIN_MS))
      end
    end
  end
  for k = 1, ng do
    local key = KEYS[nb + k]
    if S[VV + k] then call('HSET', key, S[VF + k], format('%d', S[VV + k])) end
    if more and more[k] then
      for field, value in pairs(more[k]) do
        if value then call('HSET', key, field, format('%d', value)) end
      end
    end
  end
  for j = 1, nl do
    local key, at = KEYS[nb + ng + j], HEAD + nb + 2 * ng + j
    if applied == 1 then
      for r = 1, n do
        if done[r] == 1 then call('ZREM', key, ARGV[at + (r - 1) * stride]) end
      end
    else
      local list = {}
      for r = 1, n do
        if done[r] == 1 then list[#list + 1] = ARGV[at + (r - 1) * stride] end
      end
      -- (unpack has a stack limit; a batch is far below it, but stay safe)
      for start = 1, #list, 1000 do
        call('ZREM', key, unpack(list, start, math.min(#list, start + 999)))
      end
    end
  end
end
return done
