-- One circuit breaker shared by every gateway replica, in one hash with a TTL.
-- The same state machine as gateway/resilience/breaker.py: ejections that grow
-- (open_ms x n, capped at max_open_ms, one forgiven per open_ms spent closed) and a
-- half-open ramp (probes x 2^successes slots, closed after `close_after` successes).
-- KEYS[1]  the breaker's hash, e.g. gw:breaker:{openai-main}
-- ARGV     op, successes, failures, trailing_failures, had_success,
--          failure_threshold, window_ms, error_rate, min_requests, open_ms,
--          half_open_probes, window_buckets, max_open_ms, close_after
-- op: sync        add batched outcomes (counted only while closed), report state
--     probe       take a half-open trial slot if one is free
--     probe_ok    a trial succeeded: one step up the ramp, or close
--     probe_fail  a trial failed: open again, one ejection longer
--     release     a trial ended without a verdict: free its slot
-- Returns {state, ms until an open breaker turns half-open, 1 if a slot was granted,
--          ms since the circuit last opened (0 if it never did)}.
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
local max_open_ms = tonumber(ARGV[13])
local close_after = tonumber(ARGV[14])

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

local h = {}
local flat = redis.call('HGETALL', key)
for i = 1, #flat, 2 do h[flat[i]] = flat[i + 1] end
local function num(field) return tonumber(h[field] or '0') end

local open_until = num('open_until')
local opened_at = num('opened_at')
local half_open = h['half_open'] == '1'
local ejections = num('ejections')

local function state()
  if open_until > now then return 'open' end
  if half_open then return 'half_open' end
  return 'closed'
end

-- the outcome counts start afresh; what outlives them: ejections and when they happened
local function reset(fields)
  redis.call('DEL', key)
  redis.call('HSET', key, unpack(fields))
end

local function trip()
  if not half_open then
    local closed_at = num('closed_at')
    local forgiven = math.floor((now - closed_at) / open_ms)
    ejections = math.max(0, ejections - forgiven)
  end
  ejections = ejections + 1
  opened_at = now
  open_until = now + math.min(max_open_ms, open_ms * ejections)
  half_open = true
  reset({'open_until', open_until, 'opened_at', now, 'half_open', '1', 'probes', 0,
    'probe_ok', 0, 'ejections', ejections})
end

local function close()
  open_until = 0
  half_open = false
  reset({'closed_at', now, 'ejections', ejections, 'opened_at', opened_at})
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
  if h['closed_at'] == nil then redis.call('HSET', key, 'closed_at', now) end
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
    local slots = max_probes * math.pow(2, math.min(30, num('probe_ok')))
    if probes < slots then
      granted = 1
      redis.call('HSET', key, 'probes', probes + 1, 'probes_at', now)
    end
  end
elseif op == 'probe_ok' and current == 'half_open' then
  local ok = num('probe_ok') + 1
  if ok >= close_after then
    close()
  else
    redis.call('HSET', key, 'probe_ok', ok, 'probes', math.max(0, num('probes') - 1))
  end
elseif op == 'probe_fail' and current == 'half_open' then
  trip()
elseif op == 'release' and current == 'half_open' and num('probes') > 0 then
  redis.call('HINCRBY', key, 'probes', -1)
end

if redis.call('EXISTS', key) == 1 then
  -- long enough to remember the ejections until they would all be forgiven
  local memory = window_ms + max_open_ms + open_ms * math.max(1, ejections)
  redis.call('PEXPIRE', key, math.max(1000, 2 * memory))
end
local since = 0
if opened_at > 0 then since = math.max(0, now - opened_at) end
return {state(), math.max(0, open_until - now), granted, since}
