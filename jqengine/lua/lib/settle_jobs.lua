-- The outcomes of `count` running jobs in ARGV from index b (7 values a job: id, attempt, token, 'c' |
-- 'f', result or error text, retry delay ms, permanent 0|1), each written by complete_job or fail_job;
-- appends per job its code (`codes`: the script's map of the helpers' words 'ok', 'retry', 'errored',
-- 'canceled', 'stale', 'missing' to its C_* codes) and the retry's run_at (0 unless a retry) to `out`.
-- Returns the jobs made ready (the caller wakes workers for those). settle.lua and settle_claim.lua.
-- The completed jobs leave RUNNING and enter DONE with one ZREM and one ZADD a chunk (at most 500 jobs).
-- uses: complete_job, fail_job
local function settle_jobs(b, count, out, codes)
  local woken = 0
  local ended = {running = {}, done = {}}
  local function flush()
    if #ended.running > 0 then redis.call('ZREM', RUNNING, unpack(ended.running)) end
    if #ended.done > 0 then redis.call('ZADD', DONE, unpack(ended.done)) end
    ended.running, ended.done = {}, {}
  end
  for i = 0, count - 1 do
    local at = b + i * 7
    local id, attempt, token, text = ARGV[at], ARGV[at + 1], ARGV[at + 2], ARGV[at + 4]
    local state, freed, run_at = nil, 0, 0
    if ARGV[at + 3] == 'c' then
      state, freed = complete_job(id, attempt, token, text, ended)
      if #ended.running >= 500 then flush() end
    else
      state, freed, run_at = fail_job(id, attempt, token, text, tonumber(ARGV[at + 5]), ARGV[at + 6] == '1')
    end
    out[#out + 1] = codes[state]
    out[#out + 1] = run_at
    woken = woken + freed
  end
  flush()
  return woken
end
