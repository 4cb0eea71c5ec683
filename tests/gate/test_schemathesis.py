"""Schemathesis against a live gateway process: requests generated from /openapi.json — valid ones and,
in negative mode, ones that break the schema (wrong types, missing fields, out-of-range values, bad path
parameters) — never get a 5xx, every refusal is JSON with an error code (``schemathesis_hooks.py``), and
every answer's status is one the document declares for the operation, its body an instance of the declared
schema.

The run is bounded and deterministic: deterministic generation, one worker, the examples and coverage
phases plus at most ``MAX_EXAMPLES`` fuzzed cases per operation and mode (~2,100 requests; ~65 s on a
loaded 2-core machine, where the run before the typed document took ~80 s)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import orjson
import pytest
import redis.asyncio as aioredis

from jqengine import Engine, SwitchNotFound
from jqstack.manager import Endpoints
from jqstack.procs import free_port
from jqstack.supervise import Children, http_ok, python_m

HOOKS = Path(__file__).with_name("schemathesis_hooks.py")
MAX_EXAMPLES = 10


@pytest.fixture
def gateway_process(endpoints: Endpoints, prefix: str, make_topic: Callable[..., str]) -> Iterator[str]:
    topic = make_topic("jobs")
    port = free_port()
    env = {
        **os.environ,
        "JOBQ_GATE_PORT": str(port),
        "JOBQ_GATE_TOKENS": "schemathesis-token",
        "JOBQ_KAFKA_BOOTSTRAP": endpoints.kafka_bootstrap,
        "JOBQ_REDIS_URL": endpoints.redis_url or "",
        "JOBQ_CONSUL_ADDR": endpoints.consul_addr,
        "JOBQ_CRON_KV_PREFIX": f"jobq-test/{prefix}",
        "JOBQ_ROUTES": orjson.dumps([{"queues": "*", "topic": topic}]).decode(),
        "JOBQ_DEFAULT_TOPIC": topic,
        "JOBQ_LOG_LEVEL": "warning",
        "JOBQ_GATE_CLAIM_WAIT_MAX_MS": "50",  # generated long-polls must not make the run crawl
    }
    url = f"http://127.0.0.1:{port}"
    with Children(grace_s=30.0) as children:
        gateway = children.start("gateway", python_m("kafkagate"), output="inherit", env=env)
        gateway.wait_ready(http_ok(url + "/healthz", timeout_s=1), timeout_s=30)
        yield url
    asyncio.run(_lift_every_switch(endpoints.redis_url or ""))


async def _lift_every_switch(url: str) -> None:
    """Generated requests put kill switches in force on every queue of the session's Redis (its admin
    token may): lifted here, or the tests after this one would claim nothing of their kinds."""
    client = aioredis.Redis.from_url(url)
    try:
        engine = Engine(client)
        for switch in await engine.admin.switches():
            with contextlib.suppress(SwitchNotFound):
                await engine.admin.lift_switch(switch.name)
    finally:
        await client.aclose()


def test_generated_requests_never_get_a_server_error(gateway_process: str, tmp_path: Path) -> None:
    """Positive and negative data (``--mode all``)."""
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "schemathesis.cli",
            "run",
            f"{gateway_process}/openapi.json",
            "--header",
            "Authorization: Bearer schemathesis-token",
            "--checks",
            "not_a_server_error,refusal_is_json_with_code,status_code_conformance,response_schema_conformance",
            "--mode",
            "all",
            "--max-examples",
            str(MAX_EXAMPLES),
            "--phases",  # the stateful phase (links inferred from the answers' schemas) would triple the run
            "examples,coverage,fuzzing",
            "--generation-deterministic",  # the same cases every run (a seed is then not used)
            "--workers",
            "1",
            "--report-dir",
            str(tmp_path),
        ],
        env={**os.environ, "SCHEMATHESIS_HOOKS": str(HOOKS)},
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert out.returncode == 0, out.stdout[-6000:] + out.stderr[-2000:]
