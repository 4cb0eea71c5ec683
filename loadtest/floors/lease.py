"""The floors' lease queue: the least Redis data a queue needs to keep a lease queue's promise.

The promise: a job written is run at least once; a claimed job is leased until a deadline and carries a
token; only that token completes it (a worker whose lease ran out cannot complete a job another worker
now holds); a job whose lease ran out is claimed again. Keys of queue ``q`` (one hash tag, so one
Redis Cluster slot):

* ``floor:{q}:jobs`` — hash, id → payload (the record's value, as Kafka had it);
* ``floor:{q}:pending`` — sorted set of the ids waiting, by the time they were written (FIFO);
* ``floor:{q}:leased`` — sorted set of the claimed ids, by lease deadline (ms);
* ``floor:{q}:tokens`` — hash, claimed id → its lease token;
* ``floor:{q}:seq`` — the counter the tokens are made from.

Left out, against jobq's engine: priorities, delayed and far-future jobs, job kinds and per-kind limits,
attempts and retries with backoff, dead letters, results, lifecycle events, stats and counters, job
records readable after the end, fair queues, rate limits, exclusivity, idempotency keys, pause, fences.
"""

from __future__ import annotations

from collections.abc import Sequence

import redis

__all__ = ["SETTLE_CLAIM", "count_key", "keys", "write"]


def keys(queue: str) -> list[str]:
    """The script's keys of ``queue``: pending, leased, jobs, tokens, seq."""
    return [f"floor:{{{queue}}}:{name}" for name in ("pending", "leased", "jobs", "tokens", "seq")]


def count_key(queue: str) -> str:
    """Where the benchmark's no-op job counts itself (the one Redis round trip it makes)."""
    return f"floor:count:{queue}"


def write(pipe: redis.client.Pipeline, queue: str, rows: Sequence[tuple[bytes, bytes]], at_ms: int) -> None:
    """Queue ``rows`` (id, payload) onto ``pipe``: two commands for the whole batch. Idempotent for a job
    still pending (``ZADD NX``): a batch written again after a crash before its commit adds nothing."""
    pending, _, jobs, _, _ = keys(queue)
    pipe.hset(jobs, mapping=dict(rows))
    pipe.zadd(pending, {job_id: at_ms for job_id, _ in rows}, nx=True)


SETTLE_CLAIM = """
-- KEYS: pending, leased, jobs, tokens, seq; ARGV: now_ms, lease_ms, n, then (id, token) of each job run.
-- Settles the jobs run (each only by its own token), then claims up to n: expired leases first, then the
-- oldest pending. Returns {settled, id1, token1, payload1, ...}.
local now, lease, n = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local settled = 0
for i = 4, #ARGV, 2 do
  if redis.call('HGET', KEYS[4], ARGV[i]) == ARGV[i + 1] then
    redis.call('ZREM', KEYS[2], ARGV[i])
    redis.call('HDEL', KEYS[4], ARGV[i])
    redis.call('HDEL', KEYS[3], ARGV[i])
    settled = settled + 1
  end
end
local out = {settled}
if n <= 0 then return out end
local ids = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', now, 'LIMIT', 0, n)
if #ids < n then
  local fresh = redis.call('ZRANGE', KEYS[1], 0, n - #ids - 1)
  if #fresh > 0 then
    redis.call('ZREM', KEYS[1], unpack(fresh))
    for _, id in ipairs(fresh) do ids[#ids + 1] = id end
  end
end
if #ids == 0 then return out end
local seq = redis.call('INCR', KEYS[5])
local deadlines, tokens = {}, {}
for i, id in ipairs(ids) do
  local token = seq .. '.' .. i
  deadlines[#deadlines + 1] = now + lease
  deadlines[#deadlines + 1] = id
  tokens[#tokens + 1] = id
  tokens[#tokens + 1] = token
  out[#out + 1] = id
  out[#out + 1] = token
end
redis.call('ZADD', KEYS[2], unpack(deadlines))
redis.call('HSET', KEYS[4], unpack(tokens))
local payloads = redis.call('HMGET', KEYS[3], unpack(ids))
local rows = {settled}
for i = 1, #ids do
  rows[#rows + 1] = out[2 * i]
  rows[#rows + 1] = out[2 * i + 1]
  rows[#rows + 1] = payloads[i] or ''
end
return rows
"""
"""The worker's one call per round (see the module's docstring for the promise)."""
