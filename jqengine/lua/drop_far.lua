#!lua
-- drop_far: forget far-future jobs' index entries (their records were tombstoned in the schedule topic:
-- unscheduled, or moved into the engine). Jobs Redis holds are not touched.
-- KEYS[1] far      HASH far-future jobs kept in Kafka's schedule topic: id -> run_at (ms)
-- derived: none
-- ARGV: [1] now  [2..] ids
-- returns: {C_OK, entries removed}
-- uses: none
local removed = 0
for i = 2, #ARGV do removed = removed + redis.call('HDEL', FAR, ARGV[i]) end
return {C_OK, removed}
