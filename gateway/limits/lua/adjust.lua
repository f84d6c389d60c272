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
local call, KEYS, ARGV, tostring, unpack = redis.call, KEYS, ARGV, tostring, unpack
local ceil = math.ceil
-- (a string's `+ 0` reads it as tonumber does, with one strtod where tonumber has two)
local nb, ng, nl = ARGV[1] + 0, ARGV[2] + 0, ARGV[3] + 0
local marker_ttl = ARGV[4]
local marked = marker_ttl ~= '0'
local capacities, rates = {}, {}
local a = 4
for i = 1, nb do
  capacities[i], rates[i] = ARGV[a + 1] + 0, ARGV[a + 2] + 0
  a = a + 2
end
local stride = nb + 2 * ng + nl
local n = 1
if stride > 0 then n = (#ARGV - a) / stride end
local markers = nb + ng + nl
local MARGIN_MS = 10000
local format = string.format
local WHOLE = 2 ^ 53

-- a number as '%.17g' writes it, through libc's integer path when it is whole
local function exact(x)
  if x % 1 == 0 and x < WHOLE and x > -WHOLE then return format('%d', x) end
  return format('%.17g', x)
end

local clock = nil
local now_us = nil
-- each bucket's tokens as read (refilled to now), whether its key was there, and as
-- adjusted
local read, existed, tokens = {}, {}, {}
-- budget fields as read, then as adjusted (false: the field is gone)
local values = {}
for k = 1, ng do values[k] = {} end
local members = {}
for j = 1, nl do members[j] = {} end

local done, any_done = {}, false
for r = 1, n do
  local base = a + (r - 1) * stride
  if marked and not call('SET', KEYS[markers + r], '1', 'NX', 'EX', marker_ttl) then
    done[r] = 0
  else
    done[r] = 1
    any_done = true
    for i = 1, nb do
      local capacity, rate = capacities[i], rates[i]
      local delta = ARGV[base + i] + 0
      local left = tokens[i]
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
          left = state[1] + elapsed / 1000000 * rate
          if not (left < capacity) then left = capacity end
          existed[i] = true
        end
        read[i] = left
      end
      -- usage above the reservation is owed (the bucket may go below zero), but never
      -- more than one full bucket, so one runaway reply cannot lock a key out for long
      left = left - delta
      if not (left < capacity) then left = capacity end
      if not (left > -capacity) then left = -capacity end
      tokens[i] = left
    end
    for k = 1, ng do
      local at = base + nb + 2 * k
      local delta = ARGV[at] + 0
      -- a delta of 0 changes nothing (a field is never below 0)
      if delta ~= 0 then
        local field = ARGV[at - 1]
        local value = values[k][field]
        if value == nil then
          value = tonumber(call('HGET', KEYS[nb + k], field) or '') or false
        end
        -- a reservation whose period or window has passed is gone; nothing to correct
        if value then value = math.max(0, value + delta) end
        values[k][field] = value
      end
    end
    for j = 1, nl do
      local list = members[j]
      list[#list + 1] = ARGV[base + nb + 2 * ng + j]
    end
  end
end

if any_done then
  if clock ~= nil then
    -- TIME's seconds and microseconds make the stamp: now_us's digits, no formatting
    local stamp = clock[1] .. string.sub('00000' .. clock[2], -6)
    for i = 1, nb do
      local left = tokens[i]
      call('HSET', KEYS[i], 't', exact(left), 'ts', stamp)
      -- a bucket with no fewer tokens than it had needs no longer to refill than its TTL
      -- (set by the write before, for the tokens it had then) allows
      if not existed[i] or left < read[i] then
        call('PEXPIRE', KEYS[i],
          format('%d', ceil((capacities[i] - left) / rates[i] * 1000) + MARGIN_MS))
      end
    end
  end
  for k = 1, ng do
    for field, value in pairs(values[k]) do
      if value then call('HSET', KEYS[nb + k], field, format('%d', value)) end
    end
  end
  for j = 1, nl do
    local list = members[j]
    -- (unpack has a stack limit; a batch is far below it, but stay safe)
    for start = 1, #list, 1000 do
      call('ZREM', KEYS[nb + ng + j], unpack(list, start, math.min(#list, start + 999)))
    end
  end
end
return done
