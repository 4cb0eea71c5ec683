"""What ``jobq demo`` runs and expects: its pipeline's settings, its workload and the checks of its outcome.

The pipeline: topics ``jobs.demo`` (the ``demo.*`` queues) and ``jobs.default``, the stack's tokens (the
development tokens of ``jobq stack env`` on a plain stack, the secure stack's own), each role's server
settings from the stack (:meth:`jqstack.manager.Stack.client_env`), JSON logs, the schedulers keeping the
demo's and the canary's queues only. The workload, enqueued over HTTP: plain, delayed, prioritized,
exclusive, flaky and failing jobs (so the dead-letter list fills) and a cron schedule every 10 s, each job
with the final state it must reach. The command itself (starting and supervising the processes, the status
screen) is :mod:`jobq.commands.demo`."""

from __future__ import annotations

import secrets
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import orjson

from jobq.commands.stack import StackTokens
from jqcore.errors import JobqError
from jqcore.routing import RoutingSettings
from jqcore.settings.common import load_env
from jqcore.settings.kafka import KafkaSettings
from jqcore.settings.pipeline import HistorySettings, RelayKeys
from jqcore.settings.servers import ConsulSettings, RedisSettings
from jqruntime.client import Gateway, JobqClient
from jqruntime.stores.history import HistoryStore
from jqstack.pipeline import PipelineEnv, Role
from jqweb.overview import Sources

__all__ = [
    "APP",
    "HOOK_KIND",
    "HOOK_QUEUE",
    "QUEUES",
    "SCHEDULED",
    "TOPICS",
    "Job",
    "enqueue",
    "in_history",
    "pipeline_env",
    "sources",
    "states",
    "workload",
]

APP = "examples.demo_app:registry"
"""The demo worker's handlers (``module:attribute`` of a ``worker.Registry``): ``examples/`` of the checkout
(``./run demo``), which the worker gets on its ``PYTHONPATH``; the installed product leaves it out."""
TOPICS = ["jobs.demo", "jobs.default"]
ROUTES = [{"queues": "demo.*", "topic": "jobs.demo"}]
CRON = "demo.tick"
"""The demo's cron schedule (a no-op job into demo.plain every 10 s)."""
QUEUES = ["demo.plain", "demo.delayed", "demo.priority", "demo.exclusive", "demo.flaky", "demo.failing"]
HOOK_QUEUE, HOOK_KIND = "demo.hooks", "demo.hook"
"""The demo's push-dispatch kind and its queue (``jobq dispatcher`` POSTs them to ``examples.dispatch_hook``;
no worker pool serves the queue)."""
SCHEDULED = "demo.*,canary.*"
"""The queues the demo's schedulers keep (and whose events they ship): the demo's and the canary's, not
whatever else lives in the stack's Redis (the test suite runs the demo on a Redis full of other queues)."""

Job = tuple[str, str, str]
"""(queue, job id, expected final state) of an enqueued demo job."""


def pipeline_env(
    servers: Callable[[Role], Mapping[str, str]], tokens: StackTokens, history_path: str
) -> PipelineEnv:
    """The settings of the demo's processes: each role reaches the servers with ``servers(role)`` (the
    stack's ``client_env``), the gateways take ``tokens.gate`` (the canary sends it), the dashboard
    ``tokens``' own; the history tables at ``history_path``."""
    return PipelineEnv(
        servers,
        token=tokens.gate,
        log_format="json",
        settings={
            **tokens.web_settings(),
            "JOBQ_ROUTES": orjson.dumps(ROUTES).decode(),
            "JOBQ_DEFAULT_TOPIC": "jobs.default",
            "JOBQ_RELAY_TOPICS": ",".join(TOPICS),
            "JOBQ_RELAY_SESSION_TTL_S": "10",
            "JOBQ_RELAY_LOCK_DELAY_S": "1",
            "JOBQ_HISTORY_PATH": history_path,
            "JOBQ_CALLBACK_SECRET": secrets.token_urlsafe(24),  # the gateways' and the dispatcher's
        },
    )


def sources(spec: PipelineEnv) -> Sources:
    """The demo's own reads (status screen, history) with the settings of ``spec``'s one-off commands (the
    ``admin`` role on a secure stack); the demo's environment is left as it was."""
    env = spec.common()
    return Sources(
        routing=load_env(RoutingSettings, env),
        relay=load_env(RelayKeys, env),
        kafka=load_env(KafkaSettings, env),
        consul=load_env(ConsulSettings, env),
        redis=load_env(RedisSettings, env),
        history=load_env(HistorySettings, env),
    )


def workload() -> list[tuple[str, dict[str, Any], str]]:
    """(queue, job, expected final state)."""
    jobs: list[tuple[str, dict[str, Any], str]] = []
    jobs += [
        ("demo.plain", {"kind": "demo.sleep", "args": {"seconds": 0.05}}, "completed") for _ in range(20)
    ]
    jobs += [
        (
            "demo.delayed",
            {"kind": "demo.sleep", "args": {"seconds": 0.01}, "delay_ms": 3000 + 1000 * i},
            "completed",
        )
        for i in range(5)
    ]
    jobs += [
        ("demo.priority", {"kind": "demo.noop", "priority": p}, "completed") for p in (50, 10, 40, 20, 30)
    ]
    jobs += [
        (
            "demo.exclusive",
            {"kind": "demo.sleep", "args": {"seconds": 0.2}, "excl": f"account-{i % 3}"},
            "completed",
        )
        for i in range(9)
    ]
    jobs += [("demo.flaky", {"kind": "demo.flaky", "args": {"fail_times": 1}}, "completed") for _ in range(3)]
    jobs += [("demo.failing", {"kind": "demo.always_fails"}, "errored") for _ in range(3)]
    jobs += [  # pushed to the demo's downstream: answered at once, or 202 and a callback later
        (HOOK_QUEUE, {"kind": HOOK_KIND, "args": {"mode": mode}}, "completed")
        for mode in ("now", "now", "now", "later", "later")
    ]
    return jobs


async def enqueue(gateways: list[Gateway], token: str, hook_url: str) -> list[Job]:
    """Configure the demo's queues, cron schedule and push-dispatch kind (POSTed to ``hook_url``), and
    enqueue :func:`workload` through ``gateways``."""
    async with JobqClient(gateways, token, az="az-a") as client:
        await client.request(
            "PUT",
            f"/v1/kinds/{HOOK_KIND}",
            json={
                "queues": [HOOK_QUEUE],
                "dispatch": {"url": hook_url, "timeout_s": 5, "callback_timeout_s": 30},
            },
            idempotent=True,
        )
        await client.request(
            "PATCH",
            "/v1/queues/demo.exclusive",
            json={"mode": "exclusive", "excl_key": "account"},
            idempotent=True,
        )
        await client.request(  # fired by the schedulers every 10 s; `jobq cron list` shows it
            "PUT",
            f"/v1/cron/{CRON}",
            json={"every_s": 10, "queue": "demo.plain", "kind": "demo.noop"},
            idempotent=True,
        )
        out = []
        for queue, job, expected in workload():
            ids = await client.enqueue(queue, [job])
            out.append((queue, ids[0], expected))
        return out


async def states(gateways: list[Gateway], token: str, jobs: list[Job]) -> dict[str, int]:
    """How many demo jobs reached their expected state (``ok``), and the others per state reached."""
    async with JobqClient(gateways, token) as client:
        tally: dict[str, int] = {"ok": 0}
        for queue, job_id, expected in jobs:
            info = await client.get_job(queue, job_id)
            state = info["state"] if info else "in kafka"
            if state == expected:
                tally["ok"] += 1
            else:
                tally[state] = tally.get(state, 0) + 1
        return tally


def in_history(jobs: list[Job], history: HistorySettings) -> int:
    """How many demo jobs the history tables show in their expected state (0 before the first batch)."""
    root: Path = history.root
    if not root.is_dir():
        return 0
    ids = ", ".join("'" + job_id.replace("'", "''") + "'" for _, job_id, _ in jobs)
    try:
        rows = HistoryStore(root).query(f"SELECT queue, id, to_state FROM current WHERE id IN ({ids})").rows
    except JobqError:  # tables being written for the first time: the next poll reads them
        return 0
    seen = {(queue, job_id): state for queue, job_id, state in rows}
    return sum(1 for queue, job_id, expected in jobs if seen.get((queue, job_id)) == expected)
