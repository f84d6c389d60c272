-- One admin change, all or nothing (gateway/admin/change.py).
-- KEYS: tenants, keys, hashes, revoked (hashes), version (string), audit (stream): one hash
-- tag. A revocation is a change like any other: it deletes the record from keys and writes
-- it to revoked, both here, at once
-- ARGV[1]: JSON {expect = [[table, field, state, value]...], write = [[table, field, value]...],
--               delete = [[table, field]...], audit = [name, value, ...], audit_max = N}
-- returns {0, version} once written, or {i, 0}: expectation i (1-based) did not hold
local change = cjson.decode(ARGV[1])
local tables = {tenants = KEYS[1], keys = KEYS[2], hashes = KEYS[3], revoked = KEYS[4]}
-- `unowned`: no record of the table names the field as its tenant; records are the
-- gateway's compact JSON and tenant ids are plain ([A-Za-z0-9_.-]), so the record holds
-- '"tenant":"<id>"' exactly when it is that tenant's (a quote inside a string is escaped)
local function owned(table_key, tenant)
  local needle = '"tenant":"' .. tenant .. '"'
  for _, record in ipairs(redis.call('HVALS', table_key)) do
    if string.find(record, needle, 1, true) then return true end
  end
  return false
end
for i, expect in ipairs(change.expect) do
  local state = expect[3]
  if state == 'unowned' then
    if owned(tables[expect[1]], expect[2]) then return {i, 0} end
  else
    local current = redis.call('HGET', tables[expect[1]], expect[2])
    if (state == 'absent' and current)
      or (state == 'present' and not current)
      or (state == 'equal' and current ~= expect[4]) then
      return {i, 0}
    end
  end
end
for _, write in ipairs(change.write) do
  redis.call('HSET', tables[write[1]], write[2], write[3])
end
for _, gone in ipairs(change.delete) do
  redis.call('HDEL', tables[gone[1]], gone[2])
end
local version = redis.call('INCR', KEYS[5])
local entry = change.audit
table.insert(entry, 'version')
table.insert(entry, tostring(version))
redis.call('XADD', KEYS[6], 'MAXLEN', '~', change.audit_max, '*', unpack(entry))
return {0, version}
