-- Write a batch of ledger records, each exactly once: stream entries plus the day and
-- month counters. The caller sums the batch's records per group (a UTC day and one
-- tenant, key, model and provider); a record found already written is taken out of its
-- group's sums, so each counter field is incremented once per batch, by what was written.
--
-- KEYS[1]          the stream
-- KEYS[2..2N+1]    per record, its "written" marker, a bitmap (minted ids) or its own
--                  key, then its own key (the marker of a gateway from before bitmaps)
-- KEYS[2N+2..]     the aggregate hashes the batch touches
-- ARGV[1] N   ARGV[2] marker TTL (s)   ARGV[3] stream MINID   ARGV[4] stream MAXLEN
-- ARGV[5] day hash TTL (s)   ARGV[6] month hash TTL (s)
-- ARGV[7] D (dimensions)   ARGV[8] M (metrics), then the M metric names
-- then G (groups), then per group 3D + M values:
--   2D indexes into KEYS: its D day hashes, then its D month hashes, members' order
--   its D members (tenant, key id, model, provider)
--   M integer sums over the group's records, one per metric
-- then per record 3 values:
--   the record as JSON (the stream entry's one field, `record`)
--   its marker's bit offset in its bitmap key, or -1: the key is the record's own
--   its group's number (from 1), then its M integer increments, space-separated
--
-- A marker is set (SETBIT, or SET NX) where its record is written, so a retried flush,
-- or the same record twice in one batch, writes nothing again; a bitmap's TTL starts
-- again with each bit set, so every bit lives at least the marker TTL. A record whose
-- own key is set was written by a gateway from before bitmaps (a journal replayed
-- across the upgrade): written already.
-- Returns the number of records written.
local n = tonumber(ARGV[1])
local marker_ttl = ARGV[2]
local min_id = ARGV[3]
local max_len = ARGV[4]
local day_ttl = ARGV[5]
local month_ttl = ARGV[6]
local dimensions = tonumber(ARGV[7])
local metric_count = tonumber(ARGV[8])
local metrics = {}
for m = 1, metric_count do
  metrics[m] = ARGV[8 + m]
end
local group_count = tonumber(ARGV[9 + metric_count])
local groups_at = 10 + metric_count
local group_stride = 3 * dimensions + metric_count
local sums_offset = 3 * dimensions
local records_at = groups_at + group_count * group_stride

local corrected = {}  -- group -> its sums as numbers, once a duplicate is taken out
local written = 0
local bitmaps = {}  -- bitmap keys with a bit set by this batch: their TTL starts again
local function first_write(marker, own, bit)
  if bit < 0 then
    return redis.call('SET', own, '1', 'EX', marker_ttl, 'NX')
  end
  if redis.call('SETBIT', marker, bit, 1) == 1 then
    return false
  end
  bitmaps[marker] = true
  return redis.call('EXISTS', own) == 0
end
for r = 1, n do
  local at = records_at + (r - 1) * 3
  if first_write(KEYS[2 * r], KEYS[2 * r + 1], tonumber(ARGV[at + 1])) then
    redis.call('XADD', KEYS[1], '*', 'record', ARGV[at])
    written = written + 1
  else
    local next_number = string.gmatch(ARGV[at + 2], '-?%d+')
    local g = tonumber(next_number())
    local sums = corrected[g]
    if sums == nil then
      sums = {}
      local sums_at = groups_at + (g - 1) * group_stride + sums_offset
      for m = 1, metric_count do
        sums[m] = tonumber(ARGV[sums_at + m - 1])
      end
      corrected[g] = sums
    end
    for m = 1, metric_count do
      sums[m] = sums[m] - tonumber(next_number())
    end
  end
end
for bitmap in pairs(bitmaps) do
  redis.call('EXPIRE', bitmap, marker_ttl)
end
if written == 0 then
  return 0
end
-- bounded by age and by size, whichever is smaller: approximate (~) trims drop whole
-- stream nodes (100 entries by default) and at most 100 nodes a call, so each is cheap
-- and a lowered bound is reached over the following batches
redis.call('XTRIM', KEYS[1], 'MINID', '~', min_id)
redis.call('XTRIM', KEYS[1], 'MAXLEN', '~', max_len)

local touched = {}  -- KEYS index -> TTL
for g = 1, group_count do
  local at = groups_at + (g - 1) * group_stride
  local sums_at = at + sums_offset
  local sums = corrected[g]
  for h = 0, 2 * dimensions - 1 do
    local index = tonumber(ARGV[at + h])
    local member = ARGV[at + 2 * dimensions + (h % dimensions)]
    local any = false
    for m = 1, metric_count do
      local value = ARGV[sums_at + m - 1]  -- the caller's exact integer string
      if sums ~= nil then
        -- an integer string whatever Lua's number formatting (HINCRBY refuses 1.2e+14);
        -- exact below 2^53 nano-dollars (about $9M) per field per batch
        value = string.format('%d', sums[m])
      end
      if value ~= '0' then
        redis.call('HINCRBY', KEYS[index], metrics[m] .. '|' .. member, value)
        any = true
      end
    end
    if any then
      if h < dimensions then
        touched[index] = day_ttl
      else
        touched[index] = month_ttl
      end
    end
  end
end
for index, ttl in pairs(touched) do
  redis.call('EXPIRE', KEYS[index], ttl)
end
return written
