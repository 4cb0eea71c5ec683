#!lua flags=allow-oom
-- gc: remove terminal jobs whose retention has passed (their dedup window closes with them).
-- KEYS[1] prefix   "jobq:{q}:", the prefix derived keys are built from (same slot; not a key)
-- KEYS[2] done     ZSET terminal jobs, score = when GC removes them (ms)
-- KEYS[3] dead     ZSET errored jobs (the dead-letter list), score = when they died (ms)
-- derived: job:<id>
-- ARGV: [1] now  [2] limit
-- returns: number of jobs removed.
-- uses: jkey
local gone = redis.call('ZRANGEBYSCORE', DONE, '-inf', NOW, 'LIMIT', 0, tonumber(ARGV[2]))
for _, id in ipairs(gone) do
  redis.call('DEL', jkey(id))
  redis.call('ZREM', DONE, id)
  redis.call('ZREM', DEAD, id)
end
return #gone
