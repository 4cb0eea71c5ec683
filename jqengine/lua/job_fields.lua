#!lua flags=no-writes
-- job_fields: fields of many jobs' records in one call (the event shipper's read of the payload it adds to
-- the events that end jobs, the dashboard's lists) — one command on the wire instead of one HMGET a job.
-- KEYS[1] prefix   "jobq:{q}:", the prefix derived keys are built from (same slot; not a key)
-- derived: job:<id>
-- ARGV: [1] now  [2] n, the fields read of each job  [3 .. 2+n] the fields  then the job ids
-- returns: each job's n values in order (nil where the field or the record is missing), one flat list
-- uses: jkey
local n = tonumber(ARGV[2])
local fields = {}
for i = 1, n do fields[i] = ARGV[2 + i] end
local out = {}
for i = 3 + n, #ARGV do
  local values = redis.call('HMGET', jkey(ARGV[i]), unpack(fields))
  for j = 1, n do out[#out + 1] = values[j] end
end
return out
