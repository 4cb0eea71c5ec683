"""``./run bench envelope``: the CPU one job's envelope costs, in-process, no servers (µs per envelope).

* decode of a typical small envelope (what the relay does per Kafka record, the worker per claimed job);
* decode of a full envelope (every optional field set);
* decode of a relay batch: 500 mixed records (small, full, delayed, a 2 KiB args), µs per record;
* validate a new envelope as the gateway does: :func:`jqcore.envelope.new_envelope` from a client's job;
* the gateway's whole body step, :func:`kafkagate.enqueue.parse_jobs` on a 100-job batch body (parse,
  validate, encode each record value), µs per job, and on a one-job body (a single enqueue request).

Time is this thread's CPU time (what a job costs the service, and steady on a busy machine where wall
time is not); each figure is the best of a few timed loops and is repeated (``--quick``: once). Also
runnable alone: ``python -m loadtest.envelope_bench [--quick]``.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import Any

import orjson

from jqcore.envelope import decode, encode, new_envelope
from kafkagate.enqueue import parse_jobs
from loadtest.report import Report

__all__ = ["run"]

AT_MS = 1_795_000_000_000
TRACE = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
CLIENT_JOB: dict[str, Any] = {
    "kind": "email.send",
    "args": {"to": "ana@example.com", "template": "welcome", "vars": {"name": "Ana", "n": 3}},
    "meta": {"tenant": "acme"},
}
BATCH_JOBS = 100


def _small() -> bytes:
    return encode(
        new_envelope("emails", "email.send", CLIENT_JOB["args"], meta={"tenant": "acme"}, at_ms=AT_MS)
    )


def _full() -> bytes:
    env = new_envelope(
        "emails.eu",
        "email.send",
        {"to": "ana@example.com", "n": [1, 2.5, -0.0, 1e21]},
        id="01a2-full",
        priority=17,
        run_at=AT_MS + 60_000,
        expires_at=AT_MS + 3_600_000,
        max_attempts=5,
        lease_ms=30_000,
        meta={"tenant": "acme", "region": "eu"},
        excl="acct:42",
        graph={"id": "g1", "node": "send"},
        trace=TRACE,
        canary=True,
        at_ms=AT_MS,
    )
    return encode(env)


def _records(n: int) -> list[bytes]:
    """A relay batch: mostly small jobs, some full or delayed ones, a few with 2 KiB of args."""
    big = {"rows": [{"sku": f"sku-{i}", "qty": i, "price": i * 1.25} for i in range(40)]}
    kinds: list[Callable[[int], bytes]] = [
        lambda i: encode(new_envelope("emails", "email.send", {"i": i}, id=f"j{i}", at_ms=AT_MS)),
        lambda i: encode(new_envelope("emails", "email.send", {"i": i}, delay_ms=5_000, at_ms=AT_MS)),
        lambda i: _full(),
        lambda i: encode(new_envelope("orders", "order.import", big, meta={"tenant": "t"}, at_ms=AT_MS)),
    ]
    weights = [6, 2, 1, 1]
    plan = [k for k, w in zip(kinds, weights, strict=True) for _ in range(w)]
    return [plan[i % len(plan)](i) for i in range(n)]


def _per_op_us(fn: Callable[[], object], ops_per_call: int, budget_s: float, loops: int = 5) -> float:
    """CPU µs per operation: the best of ``loops`` timed runs of ``fn``, each about ``budget_s / loops``."""
    fn()  # warm up (caches, lazily built decoders)
    started = time.thread_time()
    fn()
    once = max(time.thread_time() - started, 1e-6)
    calls = max(1, int(budget_s / loops / once))
    best = float("inf")
    for _ in range(loops):
        t0 = time.thread_time_ns()
        for _ in range(calls):
            fn()
        best = min(best, (time.thread_time_ns() - t0) / 1000 / (calls * ops_per_call))
    return best


def _round(budget_s: float) -> dict[str, float]:
    small, full, records = _small(), _full(), _records(500)
    batch_body = orjson.dumps(
        {"jobs": [{**CLIENT_JOB, "args": {**CLIENT_JOB["args"], "i": i}} for i in range(100)]}
    )
    one_job = CLIENT_JOB
    one_body = orjson.dumps(CLIENT_JOB)

    def client_job() -> object:
        return new_envelope(
            "emails",
            one_job["kind"],
            one_job["args"],
            meta=one_job["meta"],
            excl=None,
            trace=None,
            at_ms=AT_MS,
        )

    def relay_batch() -> object:
        return [decode(r) for r in records]

    def gateway_batch() -> object:
        return parse_jobs(
            "emails", batch_body, "application/json", max_batch=1000, idempotency=None, now=AT_MS
        )

    def gateway_single() -> object:
        return parse_jobs("emails", one_body, "application/json", max_batch=1000, idempotency=None, now=AT_MS)

    return {
        "decode, small envelope": _per_op_us(lambda: decode(small), 1, budget_s),
        "decode, full envelope": _per_op_us(lambda: decode(full), 1, budget_s),
        "decode, relay batch of 500 mixed records": _per_op_us(relay_batch, len(records), budget_s),
        "new_envelope, a client's job (gateway validation)": _per_op_us(client_job, 1, budget_s),
        "parse_jobs, 100-job batch body (gateway)": _per_op_us(gateway_batch, BATCH_JOBS, budget_s),
        "parse_jobs, one-job body (gateway)": _per_op_us(gateway_single, 1, budget_s),
    }


def run(quick: bool = False) -> Report:
    reps, budget_s = (1, 0.5) if quick else (5, 2.0)
    report = Report("envelope", {"reps": reps, "quick": quick, "budget_s": budget_s})
    samples: dict[str, list[float]] = {}
    for _ in range(reps):
        for name, value in _round(budget_s).items():
            samples.setdefault(name, []).append(value)
    for name, values in samples.items():
        report.add(name, "µs CPU/envelope", values)
    report.notes.append(f"small envelope {len(_small())} bytes, full envelope {len(_full())} bytes")
    report.notes.append("each sample: the best of 5 timed loops of thread CPU time; in-process, no servers")
    return report


if __name__ == "__main__":
    result = run(quick="--quick" in sys.argv[1:])
    for figure in result.figures:
        print(f"{figure.name:<52} {figure.median:8.2f} {figure.unit}  ±{figure.spread:.1%}")
    for note in result.notes:
        print(f"- {note}")
