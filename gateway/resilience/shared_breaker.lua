-- One circuit breaker shared by every gateway replica, in one hash with a TTL.
-- KEYS[1]  the breaker's hash, e.g. gw:breaker:{openai-main}
-- ARGV     op, successes, failures, trailing_failures, had_success,
--          failure_threshold, window_ms, error_rate, min_requests, open_ms,
--          half_open_probes, window_buckets
-- op: sync        add batched outcomes (counted only while closed), report state
--     probe       take a half-open trial slot if one is free
--     probe_ok    a trial succeeded: close
--     probe_fail  a trial failed: open again
--     release     a trial ended without a verdict: free its slot
-- Returns {state, ms until an open breaker turns half-open, 1 if a slot was granted}.
-- Time is Redis server time, so replicas with skewed clocks agree.

local key = KEYS[1]
local op = ARGV[1]
local successes = tonumber(ARGV[2])
local failures = tonumber(ARGV[3])
local trailing = tonumber(ARGV[4])
local had_success = ARGV[5] == '1'
local threshold = tonumber(ARGV[6])
local window_ms = tonumber(ARGV[7])
local error_rate = tonumber(ARGV[8])
local min_requests = tonumber(ARGV[9])
local open_ms = tonumber(ARGV[10])
local max_probes = tonumber(ARGV[11])
local buckets = tonumber(ARGV[12])

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

local h = {}
local flat = redis.call('HGETALL', key)
for i = 1, #flat, 2 do h[flat[i]] = flat[i + 1] end
local function num(field) return tonumber(h[field] or '0') end

local open_until = num('open_until')
local half_open = h['half_open'] == '1'

local function state()
  if open_until > now then return 'open' end
  if half_open then return 'half_open' end
  return 'closed'
end

local function trip()
  redis.call('DEL', key)
  open_until = now + open_ms
  half_open = true
  redis.call('HSET', key, 'open_until', open_until, 'half_open', '1', 'probes', 0)
end

local function close()
  redis.call('DEL', key)
  open_until = 0
  half_open = false
end

local current = state()
local granted = 0

if op == 'sync' and current == 'closed' and (successes + failures) > 0 then
  local consecutive = num('consecutive')
  if had_success then consecutive = trailing else consecutive = consecutive + failures end
  local width = window_ms / buckets
  local slice = math.floor(now / width)
  local slot = slice % buckets
  if num('slice:' .. slot) ~= slice or h['slice:' .. slot] == nil then
    h['ok:' .. slot] = '0'
    h['fail:' .. slot] = '0'
  end
  h['slice:' .. slot] = tostring(slice)
  h['ok:' .. slot] = tostring(num('ok:' .. slot) + successes)
  h['fail:' .. slot] = tostring(num('fail:' .. slot) + failures)
  redis.call('HSET', key, 'consecutive', consecutive, 'slice:' .. slot, slice,
    'ok:' .. slot, h['ok:' .. slot], 'fail:' .. slot, h['fail:' .. slot])
  local requests, failed = 0, 0
  for i = 0, buckets - 1 do
    local s = h['slice:' .. i]
    if s ~= nil and tonumber(s) > slice - buckets then
      requests = requests + num('ok:' .. i) + num('fail:' .. i)
      failed = failed + num('fail:' .. i)
    end
  end
  if consecutive >= threshold or (requests >= min_requests and failed >= error_rate * requests) then
    trip()
  end
elseif op == 'probe' then
  if current == 'closed' then
    granted = 1
  elseif current == 'half_open' then
    local probes = num('probes')
    -- a trial that never reported back frees its slot after open_ms
    if probes > 0 and now - num('probes_at') >= open_ms then probes = 0 end
    if probes < max_probes then
      granted = 1
      redis.call('HSET', key, 'probes', probes + 1, 'probes_at', now)
    end
  end
elseif op == 'probe_ok' and current == 'half_open' then
  close()
elseif op == 'probe_fail' and current == 'half_open' then
  trip()
elseif op == 'release' and current == 'half_open' and num('probes') > 0 then
  redis.call('HINCRBY', key, 'probes', -1)
end

if redis.call('EXISTS', key) == 1 then
  redis.call('PEXPIRE', key, math.max(1000, 2 * (window_ms + open_ms)))
end
return {state(), math.max(0, open_until - now), granted}
