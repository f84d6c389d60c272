-- Write a batch of ledger records, each exactly once: stream entries plus the day and
-- month counters, summed over the batch so each counter field is incremented once.
--
-- KEYS[1]          the stream
-- KEYS[2..N+1]     each record's "written" marker (by request id)
-- KEYS[N+2..]      the aggregate hashes the batch touches
-- ARGV[1] N   ARGV[2] marker TTL (s)   ARGV[3] stream MINID
-- ARGV[4] day hash TTL (s)   ARGV[5] month hash TTL (s)
-- ARGV[6] D (dimensions)   ARGV[7] M (metrics), then the M metric names
-- then per record, 1 + 3D + M values:
--   the record as JSON (the stream entry's one field, `record`)
--   its D members (tenant, key id, model, provider)
--   2D indexes into KEYS: its D day hashes, then its D month hashes, members' order
--   M integer increments, one per metric
--
-- A marker is checked before its record is written and set after, so a retried flush,
-- or the same request id twice in one batch, writes nothing again.
-- Returns the number of records written.
local n = tonumber(ARGV[1])
local marker_ttl = ARGV[2]
local min_id = ARGV[3]
local day_ttl = ARGV[4]
local month_ttl = ARGV[5]
local dimensions = tonumber(ARGV[6])
local metric_count = tonumber(ARGV[7])
local metrics = {}
for m = 1, metric_count do
  metrics[m] = ARGV[7 + m]
end
local first = 8 + metric_count
local stride = 1 + 3 * dimensions + metric_count

local sums = {}  -- KEYS index -> member -> totals per metric
local ttls = {}  -- KEYS index -> TTL
local written = 0
for r = 1, n do
  local at = first + (r - 1) * stride
  local marker = KEYS[1 + r]
  if redis.call('EXISTS', marker) == 0 then
    redis.call('XADD', KEYS[1], 'MINID', '~', min_id, '*', 'record', ARGV[at])
    local values_at = at + 1 + 3 * dimensions
    local values = {}
    for m = 1, metric_count do
      values[m] = tonumber(ARGV[values_at + m - 1])
    end
    for h = 0, 2 * dimensions - 1 do
      local index = tonumber(ARGV[at + 1 + dimensions + h])
      local member = ARGV[at + 1 + (h % dimensions)]
      if h < dimensions then
        ttls[index] = day_ttl
      else
        ttls[index] = month_ttl
      end
      local members = sums[index]
      if members == nil then
        members = {}
        sums[index] = members
      end
      local totals = members[member]
      if totals == nil then
        members[member] = values
        -- the next hash must not add into the table just adopted
        values = {unpack(values)}
      else
        for m = 1, metric_count do
          totals[m] = totals[m] + values[m]
        end
      end
    end
    redis.call('SET', marker, '1', 'EX', marker_ttl)
    written = written + 1
  end
end

-- field names are built here, once per counter, not once per record
for index, members in pairs(sums) do
  for member, totals in pairs(members) do
    for m = 1, metric_count do
      if totals[m] ~= 0 then
        -- an integer string whatever Lua's number formatting (HINCRBY refuses 1.2e+14);
        -- sums stay exact below 2^53 nano-dollars (about $9M) per field per batch
        redis.call('HINCRBY', KEYS[index], metrics[m] .. '|' .. member,
          string.format('%d', totals[m]))
      end
    end
  end
  redis.call('EXPIRE', KEYS[index], ttls[index])
end
return written
