"""The everyday commands against the real stack: a gateway in this process with a tokens file, a relay, and
``jobq`` run as the operator would (``JOBQ_URL``, ``JOBQ_TOKEN``), in a thread of its own (each command
runs its own event loop while the test's serves the gateway).

Tokens (``tokens_file``): ``ops`` may do everything on the test's queues (``<prefix>*``); ``viewer`` may
only read them; ``teama`` is an admin of ``<prefix>.a.*`` only; ``root`` is an admin of every queue (kind
defaults act on every queue)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import redis.asyncio as aioredis
from click.testing import Result
from typer.testing import CliRunner

from jobq.cli import app
from jqcore.routing import Route, RoutingSettings
from jqengine import Engine
from jqrelay.main import RelayService
from jqruntime.tokens import hash_line
from kafkagate.main import GateService

OPS, VIEWER, TEAMA, ROOT = (
    "ops-secret-0123456789abcdef",
    "viewer-secret-0123456789abcdef",
    "teama-secret-0123456789abcdef",
    "root-secret-0123456789abcdef",
)


def tokens_file(prefix: str) -> str:
    return (
        f'[[token]]\nname = "ops"\n{hash_line(OPS)}\nscopes = ["read", "enqueue", "admin"]\n'
        f'queues = ["{prefix}*"]\n\n'
        f'[[token]]\nname = "viewer"\n{hash_line(VIEWER)}\nscopes = ["read"]\nqueues = ["{prefix}*"]\n\n'
        f'[[token]]\nname = "teama"\n{hash_line(TEAMA)}\nscopes = ["read", "enqueue", "admin"]\n'
        f'queues = ["{prefix}.a.*"]\n\n'
        f'[[token]]\nname = "root"\n{hash_line(ROOT)}\nscopes = ["read", "enqueue", "admin"]\n'
    )


Call = Callable[..., Awaitable[tuple[int, Any]]]


@dataclass
class Ops:
    gate: GateService
    relay: RelayService
    topic: str
    queue: str
    prefix: str
    engine: Engine
    redis: aioredis.Redis

    async def jobq(self, *args: str, token: str = OPS, stdin: str | None = None, **env: str) -> Result:
        """``jobq ARGS`` as an operator holding ``token`` runs it (no terminal: confirmations need --yes)."""
        environ = {"JOBQ_URL": self.gate.url, "JOBQ_TOKEN": token, "COLUMNS": "250", **env}

        def invoke() -> Result:
            return CliRunner().invoke(app, list(args), env=environ, input=stdin)

        return await asyncio.to_thread(invoke)

    @contextlib.asynccontextmanager
    async def gate_client(self, token: str = OPS) -> AsyncIterator[Call]:
        """``await call(method, path, json_body)`` → (status, body) with ``token``, straight over HTTP."""
        async with aiohttp.ClientSession(headers={"Authorization": f"Bearer {token}"}) as http:

            async def call(method: str, path: str, body: Any = None) -> tuple[int, Any]:
                async with http.request(method, self.gate.url + path, json=body) as resp:
                    return resp.status, await resp.json()

            yield call

    async def relayed(self, n: int) -> None:
        """Wait until the relay wrote (or deduplicated) ``n`` records in all."""
        await self.relay.signals[self.topic].batch.wait_for(
            lambda c: c.get("written", 0) + c.get("duplicate", 0) >= n
        )


def error_lines(result: Result) -> list[str]:
    """The command's error lines (``error (<code>): <message>``) on stderr."""
    return [line for line in result.stderr.splitlines() if line.startswith("error (")]


def refused(result: Result, code: str) -> str:
    """The one error line of a command the gateway refused with ``code`` (exit 2), checked."""
    assert result.exit_code == 2, (result.exit_code, result.output)
    (line,) = error_lines(result)
    assert line.startswith(f"error ({code}): "), line
    return line


@pytest.fixture
async def ops(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    prefix: str,
    make_topic: Callable[..., str],
    make_gate: Callable[..., GateService],
    make_relay: Callable[..., RelayService],
    engine: Engine,
    redis: aioredis.Redis,
) -> AsyncIterator[Ops]:
    path = tmp_path / "tokens.toml"
    path.write_text(tokens_file(prefix))
    monkeypatch.setenv("JOBQ_TOKENS_FILE", str(path))
    topic = make_topic("jobs", partitions=2)
    routing = RoutingSettings(routes=[Route(queues=f"{prefix}*", topic=topic)], default_topic="")
    async with make_gate(routing, tokens=[]) as gate, make_relay(topic) as relay:
        yield Ops(gate, relay, topic, f"{prefix}.q", prefix, engine, redis)
