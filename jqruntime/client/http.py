"""The Python client of the gateway's HTTP API (apps, the canary, the CLI).

AZ-aware: given gateways with their availability zones, it sends to the ones in its own zone first and
falls over to the others when a gateway is unreachable or answers 502/503/504 (Kafka not confirming
there, or a proxy in front of it failing). When a whole round of gateways failed it waits (exponential
backoff with full jitter, never less than a gateway's ``Retry-After``) and tries the round again, up to
``attempts`` rounds and ``deadline_s`` seconds per call.

Only calls that are safe to repeat are retried after the request may have reached a gateway: GETs,
enqueues (their job ids are generated here before the first try and the body is serialized once, so
every try carries the same ids and a retry after a lost answer never makes a second job) and calls the
caller marks ``idempotent=True``. Any call still moves on when a gateway could not even be connected to
(nothing was sent). A 4xx is never retried (429 only with a ``Retry-After``).

::

    async with JobqClient([Gateway("http://gw-a:28080", "az-a"), Gateway("http://gw-b:28080", "az-b")],
                          token="...", az="az-a") as jq:
        ids = await jq.enqueue("emails", [{"kind": "email.send", "args": {"to": "x@example.com"}}])
"""

from __future__ import annotations

import random
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from types import TracebackType
from typing import Any, Literal, Self

import aiohttp
import orjson
from tenacity import (
    AsyncRetrying,
    RetryCallState,
    retry_if_exception,
    stop_after_attempt,
    stop_before_delay,
    wait_random_exponential,
)

from jqcore.envelope import content_id, new_job_id
from jqcore.errors import BackendUnavailable, JobqError
from jqcore.graphs import Graph

__all__ = ["ApiRefused", "Gateway", "GatewayUnavailable", "JobqClient", "parse_retry_after"]

RETRY_STATUSES = frozenset({502, 503, 504})
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
SNIPPET_CHARS = 200
_NOT_SENT = (aiohttp.ClientConnectorError, aiohttp.ConnectionTimeoutError)
_TRANSPORT = (aiohttp.ClientConnectionError, aiohttp.ClientPayloadError, TimeoutError)


@dataclass(frozen=True, slots=True)
class Gateway:
    url: str
    az: str = ""


class ApiRefused(JobqError):
    """The gateway refused the request (4xx, or a 5xx not worth retrying): ``code``/``message`` are its
    machine-readable reason; ``snippet`` is the start of a body that was not the API's JSON error."""

    def __init__(self, status: int, body: Any) -> None:
        err = body.get("error") if isinstance(body, dict) else None
        err = err if isinstance(err, dict) else {}
        self.snippet = body[:SNIPPET_CHARS] if isinstance(body, str) else ""
        fallback = f"HTTP {status}: {self.snippet}" if self.snippet else f"HTTP {status}"
        super().__init__(err.get("message") or fallback, code=err.get("code") or f"http_{status}")
        self.status = status
        self.fields: list[dict[str, str]] = err.get("fields") or []


class GatewayUnavailable(BackendUnavailable):
    """No gateway answered the call: ``status`` is the last HTTP status (``None``: no answer at all),
    ``snippet`` the start of its body, ``retry_after_s`` the wait the gateway asked for. ``retriable`` is
    false when the call was not safe to repeat after the request may have reached a gateway."""

    def __init__(
        self,
        message: str,
        *,
        status: int | None = None,
        snippet: str = "",
        retry_after_s: float | None = None,
        sent: bool = True,
    ) -> None:
        super().__init__(message)
        self.status, self.snippet, self.retry_after_s, self.sent = status, snippet, retry_after_s, sent


def parse_retry_after(value: str | None, now: datetime | None = None) -> float | None:
    """Seconds to wait from a ``Retry-After`` header (delay-seconds or an HTTP date); ``None`` if absent
    or unreadable. A date in the past is 0."""
    if not value or not value.strip():
        return None
    text = value.strip()
    if text.isdigit():
        return float(text)
    try:
        when = parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(0.0, (when - (now or datetime.now(UTC))).total_seconds())


def _decode(raw: bytes) -> tuple[Any, str]:
    """The JSON value of a body, or ``(None, text)`` when it is not JSON (a proxy's HTML page)."""
    if not raw:
        return None, ""
    try:
        return orjson.loads(raw), ""
    except orjson.JSONDecodeError:
        return None, raw.decode("utf-8", "replace")


def _retriable(exc: BaseException) -> bool:
    return isinstance(exc, GatewayUnavailable) and exc.retriable


def _give_up(state: RetryCallState) -> Any:
    """Attempts or deadline spent: raise the last round's failure, saying how long it was tried."""
    exc = state.outcome.exception() if state.outcome else None
    assert isinstance(exc, GatewayUnavailable)
    exc.args = (
        f"gave up after {state.attempt_number} round(s) in {state.seconds_since_start or 0.0:.1f}s: {exc}",
    )
    raise exc


def _retry_after_of(state: RetryCallState) -> float:
    exc = state.outcome.exception() if state.outcome else None
    return (exc.retry_after_s or 0.0) if isinstance(exc, GatewayUnavailable) else 0.0


@dataclass(frozen=True, slots=True)
class _Call:
    method: str
    path: str
    safe: bool
    deadline: float  # time.monotonic() by which the call gives up
    kw: dict[str, Any]


class JobqClient:
    """A client of one or more gateways.

    Defaults: ``attempts=5`` rounds through the gateways, ``deadline_s=60`` seconds per call (waits
    included; a wait that would pass it ends the call at once), ``timeout_s=30`` per try (also capped by
    what is left of the deadline), ``connect_timeout_s=5`` per TCP connect, backoff between rounds
    uniform in ``[0, min(backoff_max_s=10, backoff_s=0.25 * 2**(round-1))]`` and never under the
    largest ``Retry-After`` of the failed round.
    """

    def __init__(
        self,
        gateways: Sequence[Gateway | str],
        token: str,
        *,
        az: str = "",
        timeout_s: float = 30.0,
        connect_timeout_s: float = 5.0,
        attempts: int = 5,
        deadline_s: float = 60.0,
        backoff_s: float = 0.25,
        backoff_max_s: float = 10.0,
    ) -> None:
        if not gateways:
            raise ValueError("JobqClient needs at least one gateway")
        if attempts < 1 or deadline_s <= 0 or timeout_s <= 0 or connect_timeout_s <= 0:
            raise ValueError("attempts must be >= 1 and every timeout > 0")
        self.gateways = [g if isinstance(g, Gateway) else Gateway(g) for g in gateways]
        self.az = az
        self.timeout_s, self.connect_timeout_s = timeout_s, connect_timeout_s
        self.attempts, self.deadline_s = attempts, deadline_s
        self.backoff = wait_random_exponential(multiplier=backoff_s, max=backoff_max_s)
        self._headers = {"Authorization": f"Bearer {token}"}
        self._session: aiohttp.ClientSession | None = None

    async def __aenter__(self) -> Self:
        self._session = aiohttp.ClientSession(headers=self._headers)
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    def _order(self) -> list[Gateway]:
        """Own zone first (shuffled, to spread load), then the rest (shuffled)."""
        mine = [g for g in self.gateways if self.az and g.az == self.az]
        rest = [g for g in self.gateways if g not in mine]
        random.shuffle(mine)
        random.shuffle(rest)
        return mine + rest

    def wait_s(self, state: RetryCallState) -> float:
        """The pause before the next round: full-jitter backoff, at least the gateways' Retry-After."""
        return max(self.backoff(state), _retry_after_of(state))

    async def request(self, method: str, path: str, *, idempotent: bool | None = None, **kw: Any) -> Any:
        """One API call (``kw`` as for aiohttp), retried over every gateway as the class docstring says.

        ``idempotent``: whether the call may be repeated after it may have reached a gateway; ``None``
        means only for GET/HEAD/OPTIONS. Raises :class:`ApiRefused` (4xx, at once) or
        :class:`GatewayUnavailable` (attempts or deadline spent, or an unsafe call that failed)."""
        if self._session is None:
            raise RuntimeError("use `async with JobqClient(...)`")
        safe = method.upper() in SAFE_METHODS if idempotent is None else idempotent
        call = _Call(method, path, safe, time.monotonic() + self.deadline_s, kw)
        retrying = AsyncRetrying(
            stop=stop_after_attempt(self.attempts) | stop_before_delay(self.deadline_s),
            wait=self.wait_s,
            retry=retry_if_exception(_retriable),
            retry_error_callback=_give_up,
        )
        return await retrying(self._round, call)

    async def _round(self, call: _Call) -> Any:
        """Try each gateway once, own zone first; raise the round's failure with its largest Retry-After."""
        failure: GatewayUnavailable | None = None
        for gw in self._order():
            remaining = call.deadline - time.monotonic()
            if remaining <= 0:
                break
            try:
                return await self._try(gw, call, remaining)
            except GatewayUnavailable as exc:
                if exc.sent and not call.safe:
                    exc.retriable = False
                    exc.args = (f"{exc} (not retried: the call is not marked idempotent)",)
                    raise
                failure = _worse(failure, exc)
        raise failure or GatewayUnavailable(f"{call.method} {call.path}: deadline spent", sent=False)

    async def _try(self, gw: Gateway, call: _Call, remaining: float) -> Any:
        assert self._session is not None
        timeout = aiohttp.ClientTimeout(
            total=min(self.timeout_s, remaining), sock_connect=self.connect_timeout_s
        )
        where = f"{call.method} {gw.url}{call.path}"
        try:
            async with self._session.request(
                call.method, gw.url + call.path, **{"timeout": timeout, **call.kw}
            ) as resp:
                return _answer(where, resp.status, resp.headers.get("Retry-After"), await resp.read())
        except _NOT_SENT as exc:
            raise GatewayUnavailable(f"{where}: {exc!r}", sent=False) from exc
        except _TRANSPORT as exc:
            raise GatewayUnavailable(f"{where}: {exc!r}") from exc

    async def enqueue(
        self,
        queue: str,
        jobs: Sequence[Mapping[str, Any]],
        *,
        idempotency_key: str | None = None,
        id_from: Literal["random", "content"] = "random",
    ) -> list[str]:
        """Enqueue jobs (dicts with the API's job fields); returns their ids once Kafka has them all.

        Jobs without an ``id`` get one here, before the first try, so every retry sends the same ids:
        a fresh one, or with ``id_from="content"`` (or a job's ``dedup_key``) the gateway's content id
        (:func:`~jqcore.envelope.content_id`: identical work is one job). A queue's own ``id_from``
        policy applies to jobs that reach the gateway without an id: this client always names them."""
        batch = [_named(queue, j, id_from == "content") for j in jobs]
        headers = {"Idempotency-Key": idempotency_key} if idempotency_key else {}
        body = await self._post_jobs(queue, {"jobs": batch}, headers)
        return list(body["ids"])

    async def enqueue_one(self, queue: str, kind: str, args: Any = None, **fields: Any) -> dict[str, Any]:
        """One job; returns the gateway's answer for it (id, topic, partition, offset)."""
        job = {"kind": kind, "args": args, "id": fields.pop("id", None) or new_job_id(), **fields}
        body = await self._post_jobs(queue, job, {})
        return dict(body["jobs"][0])

    async def _post_jobs(self, queue: str, payload: Any, headers: dict[str, str]) -> Any:
        """POST jobs whose ids are all set: the body is serialized once, so each try sends the same bytes."""
        headers = {**headers, "Content-Type": "application/json"}
        data = orjson.dumps(payload)
        return await self.request(
            "POST", f"/v1/queues/{queue}/jobs", idempotent=True, data=data, headers=headers
        )

    async def get_job(self, queue: str, job_id: str) -> dict[str, Any] | None:
        try:
            return dict(await self.request("GET", f"/v1/queues/{queue}/jobs/{job_id}"))
        except ApiRefused as exc:
            if exc.status == 404:
                return None
            raise

    async def cancel(self, queue: str, job_id: str) -> str:
        return str((await self.request("DELETE", f"/v1/queues/{queue}/jobs/{job_id}"))["outcome"])

    async def replay(self, queue: str, job_id: str) -> str:
        """A new job from a finished one (same kind, arguments, options); its id."""
        return str((await self.request("POST", f"/v1/queues/{queue}/jobs/{job_id}/replay"))["ids"][0])

    async def queue(self, queue: str) -> dict[str, Any]:
        return dict(await self.request("GET", f"/v1/queues/{queue}"))

    # ---- task graphs (jqcore.graphs) -------------------------------------------------------------
    async def submit_graph(self, graph: Graph | Mapping[str, Any]) -> dict[str, Any]:
        """Submit a whole graph (a :class:`~jqcore.graphs.Graph`, or a document such as
        :func:`~jqcore.graphs.pipeline` builds); returns once Kafka has it: its id and its nodes' job ids.
        Safe to retry: the graph id makes a second submission the same graph."""
        doc = graph.to_doc() if isinstance(graph, Graph) else dict(graph)
        data = orjson.dumps(doc)
        headers = {"Content-Type": "application/json"}
        return dict(await self.request("POST", "/v1/graphs", idempotent=True, data=data, headers=headers))

    async def get_graph(self, graph_id: str) -> dict[str, Any] | None:
        try:
            return dict(await self.request("GET", f"/v1/graphs/{graph_id}"))
        except ApiRefused as exc:
            if exc.status == 404:
                return None
            raise

    async def cancel_graph(self, graph_id: str, reason: str = "canceled") -> dict[str, Any]:
        data = orjson.dumps({"reason": reason})
        headers = {"Content-Type": "application/json"}
        return dict(
            await self.request(
                "POST", f"/v1/graphs/{graph_id}/cancel", idempotent=True, data=data, headers=headers
            )
        )

    async def retry_graph(self, graph_id: str) -> dict[str, Any]:
        return dict(await self.request("POST", f"/v1/graphs/{graph_id}/retry"))


def _answer(where: str, status: int, retry_after: str | None, raw: bytes) -> Any:
    """The decoded body of a 2xx (its text when it is not JSON); :class:`GatewayUnavailable` for a status
    worth retrying, else :class:`ApiRefused`."""
    body, text = _decode(raw)
    if status < 400:
        return text or body
    snippet = text[:SNIPPET_CHARS]
    wait = parse_retry_after(retry_after)
    if status in RETRY_STATUSES or (status == 429 and wait is not None):
        detail = snippet or (orjson.dumps(body).decode()[:SNIPPET_CHARS] if body is not None else "")
        message = f"{where}: HTTP {status} {detail}".rstrip()
        raise GatewayUnavailable(message, status=status, snippet=detail, retry_after_s=wait)
    raise ApiRefused(status, snippet or body)


def _worse(a: GatewayUnavailable | None, b: GatewayUnavailable) -> GatewayUnavailable:
    """The later failure of a round, carrying the largest Retry-After any gateway gave in it."""
    waits = [w for w in (a.retry_after_s if a else None, b.retry_after_s) if w is not None]
    b.retry_after_s = max(waits) if waits else None
    return b


def _named(queue: str, job: Mapping[str, Any], content: bool) -> dict[str, Any]:
    """The job with its id set (see :meth:`JobqClient.enqueue`); a ``dedup_key`` is used up here."""
    out = dict(job)
    key = out.pop("dedup_key", None)
    if out.get("id"):
        if key is not None:
            raise ValueError("give a job an id or a dedup_key, not both")
        return out
    if content or key is not None:
        out["id"] = content_id(queue, str(out.get("kind")), out.get("args"), key)
    else:
        out["id"] = new_job_id()
    return out
