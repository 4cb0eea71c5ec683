"""One POST of one attempt to its kind's URL, and what the answer means (``docs/dispatcher.md``).

The body is JSON: the job (``id``, ``queue``, ``kind``, ``args``, ``meta``, ``attempt``, ``max_attempts``,
``enqueued_at``) and ``callback`` (``token``, ``expires_at_ms``, ``complete_url``, ``fail_url``). Headers:
``Idempotency-Key: <id>:<attempt>``, ``X-Jobq-Attempt`` and the kind's auth header. Before anything is
sent, the auth is resolved (:meth:`jqruntime.dispatch.DispatchAuth.resolve`) and the URL's host resolved
and checked (:class:`jqdispatch.egress.Egress`); either refused is a failed attempt (``refused``) with
nothing sent. The answer: 202 → the downstream calls back; any other 2xx → done (a JSON body of at most
64 KiB is kept as the result); any other status (a redirect too: it is not followed), a timeout or no
connection → a failed attempt. The auth value is never logged.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import aiohttp
import orjson
from yarl import URL

from jqcore import metrics
from jqdispatch.egress import Egress, EgressRefused
from jqengine import MAX_RESULT_BYTES, ClaimedJob
from jqruntime.dispatch import (
    CALLBACK_GRACE_MS,
    DispatchAuthError,
    DispatchConfig,
    lease_nonce,
    sign_callback,
)

__all__ = ["MAX_RESULT_BYTES", "Answer", "Sender", "post_job"]

ERROR_BODY_CHARS = 500
"""How much of a refusing answer's body is kept in the job's error."""

Outcome = Literal["succeeded", "accepted", "failed", "timeout", "unreachable", "refused"]


@dataclass(frozen=True, slots=True)
class Answer:
    outcome: Outcome
    status: int | None = None
    result: bytes | None = None
    error: str | None = None


@dataclass(frozen=True, slots=True)
class Sender:
    """What a POST goes through: the session (its connector resolves through ``egress``), the egress
    policy, and the folder ``auth.file`` names are read from."""

    http: aiohttp.ClientSession
    egress: Egress
    secrets_dir: Path | None = None


def job_body(
    job: ClaimedJob, config: DispatchConfig, secret: str, callback_url: str, now_ms: int
) -> dict[str, Any]:
    env = job.envelope
    expires = now_ms + int((config.timeout_s + config.callback_timeout_s) * 1000) + CALLBACK_GRACE_MS
    base = f"{callback_url.rstrip('/')}/v1/callbacks/{job.queue}/jobs/{env.id}"
    token = sign_callback(secret, job.queue, env.id, job.attempt, expires, lease_nonce(job.token))
    return {
        "id": env.id,
        "queue": job.queue,
        "kind": env.kind,
        "args": env.args,
        "meta": dict(env.meta),
        "attempt": job.attempt,
        "max_attempts": env.max_attempts,
        "enqueued_at": env.enqueued_at,
        "callback": {
            "token": token,
            "expires_at_ms": expires,
            "complete_url": f"{base}/complete",
            "fail_url": f"{base}/fail",
        },
    }


def _headers(job: ClaimedJob, config: DispatchConfig, sender: Sender) -> dict[str, str]:
    """The POST's headers, the auth resolved now (:class:`DispatchAuthError` when it cannot be sent)."""
    headers = {
        "Content-Type": "application/json",
        "Idempotency-Key": f"{job.envelope.id}:{job.attempt}",
        "X-Jobq-Attempt": str(job.attempt),
    }
    if config.auth is not None:
        headers[config.auth.header] = config.auth.resolve(secrets_dir=sender.secrets_dir)
    return headers


async def post_job(sender: Sender, job: ClaimedJob, config: DispatchConfig, body: dict[str, Any]) -> Answer:
    """POST the attempt and classify the answer (never raises for the downstream's faults); a refused
    auth or address is an answer of its own (``refused``) and nothing is sent."""
    started = time.perf_counter()
    try:
        headers = _headers(job, config, sender)
        answer = await _post(sender, job, config, body, headers)
    except (DispatchAuthError, EgressRefused) as exc:
        answer = Answer("refused", error=exc.message)
    finally:
        metrics.child(metrics.DISPATCH_LATENCY, job.queue, job.envelope.kind).observe(
            time.perf_counter() - started
        )
    metrics.child(metrics.DISPATCH_OUTCOMES, job.queue, job.envelope.kind, answer.outcome).inc()
    return answer


async def _post(
    sender: Sender, job: ClaimedJob, config: DispatchConfig, body: dict[str, Any], headers: dict[str, str]
) -> Answer:
    url = URL(str(config.url))
    host, port = url.raw_host or "", url.port or 0
    try:
        async with asyncio.timeout(config.timeout_s):
            try:
                addresses = await sender.egress.check(host, port)
            except OSError as exc:
                return Answer("unreachable", error=f"unreachable: {host} does not resolve: {exc}")
            metrics.child(metrics.DISPATCHED, job.queue, job.envelope.kind).inc()
            with sender.egress.pinned(host, port, addresses):
                post = sender.http.post(url, data=orjson.dumps(body), headers=headers, allow_redirects=False)
                async with post as resp:
                    return _classify(resp.status, await _read_capped(resp, MAX_RESULT_BYTES + 1))
    except TimeoutError:
        return Answer("timeout", error=f"timeout: no answer within {config.timeout_s} s")
    except aiohttp.ClientError as exc:
        return Answer("unreachable", error=f"unreachable: {type(exc).__name__}: {exc}")


async def _read_capped(resp: aiohttp.ClientResponse, limit: int) -> bytes:
    """The body, or its first ``limit``-odd bytes when it is longer (enough to tell it is too long)."""
    chunks: list[bytes] = []
    size = 0
    async for chunk in resp.content.iter_chunked(16_384):
        chunks.append(chunk)
        size += len(chunk)
        if size >= limit:
            break
    return b"".join(chunks)


def _classify(status: int, data: bytes) -> Answer:
    if status == 202:
        return Answer("accepted", status)
    if 200 <= status < 300:
        return Answer("succeeded", status, result=_result(data))
    text = data[:ERROR_BODY_CHARS].decode("utf-8", "replace")
    return Answer("failed", status, error=f"HTTP {status}: {text}" if text else f"HTTP {status}")


def _result(data: bytes) -> bytes | None:
    """A JSON body of at most :data:`MAX_RESULT_BYTES` is the result; anything else is none."""
    if not data or len(data) > MAX_RESULT_BYTES:
        return None
    try:
        orjson.loads(data)
    except orjson.JSONDecodeError:
        return None
    return data
