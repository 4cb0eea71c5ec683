"""The Python client of the gateway's HTTP API (apps, the canary, the CLI).

AZ-aware: given gateways with their availability zones, it sends to the ones in its own zone first and
falls over to the others when a gateway is unreachable or answers 503 (Kafka not confirming there), so
an enqueue only fails when no gateway could get it into Kafka. Retries of an enqueue reuse the same job
ids (generated here when the caller gives none), so a retry after a lost response never runs a job twice.

::

    async with JobqClient([Gateway("http://gw-a:28080", "az-a"), Gateway("http://gw-b:28080", "az-b")],
                          token="...", az="az-a") as jq:
        ids = await jq.enqueue("emails", [{"kind": "email.send", "args": {"to": "x@example.com"}}])
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Self

import aiohttp

from jqcore.envelope import new_job_id
from jqcore.errors import BackendUnavailable, JobqError

__all__ = ["ApiRefused", "Gateway", "JobqClient"]


@dataclass(frozen=True, slots=True)
class Gateway:
    url: str
    az: str = ""


class ApiRefused(JobqError):
    """The gateway refused the request (4xx): ``code``/``message`` are its machine-readable reason."""

    def __init__(self, status: int, body: Any) -> None:
        err = body.get("error", {}) if isinstance(body, dict) else {}
        super().__init__(err.get("message") or f"HTTP {status}", code=err.get("code") or f"http_{status}")
        self.status = status
        self.fields: list[dict[str, str]] = err.get("fields") or []


class JobqClient:
    def __init__(
        self,
        gateways: Sequence[Gateway | str],
        token: str,
        *,
        az: str = "",
        timeout_s: float = 30.0,
    ) -> None:
        if not gateways:
            raise ValueError("JobqClient needs at least one gateway")
        self.gateways = [g if isinstance(g, Gateway) else Gateway(g) for g in gateways]
        self.az = az
        self._headers = {"Authorization": f"Bearer {token}"}
        self._timeout = aiohttp.ClientTimeout(total=timeout_s)
        self._session: aiohttp.ClientSession | None = None

    async def __aenter__(self) -> Self:
        self._session = aiohttp.ClientSession(headers=self._headers, timeout=self._timeout)
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

    async def request(self, method: str, path: str, **kw: Any) -> Any:
        """One API call, failing over between gateways on connection errors and 503s."""
        if self._session is None:
            raise RuntimeError("use `async with JobqClient(...)`")
        last: Exception | None = None
        for gw in self._order():
            try:
                async with self._session.request(method, gw.url + path, **kw) as resp:
                    body = await resp.json(content_type=None)
                    if resp.status == 503:
                        last = BackendUnavailable(f"{gw.url}: {body}")
                        continue
                    if resp.status >= 400:
                        raise ApiRefused(resp.status, body)
                    return body
            except (aiohttp.ClientConnectionError, TimeoutError) as exc:
                last = exc
        raise BackendUnavailable(f"no gateway accepted {method} {path}: {last!r}")

    async def enqueue(
        self, queue: str, jobs: Sequence[Mapping[str, Any]], *, idempotency_key: str | None = None
    ) -> list[str]:
        """Enqueue jobs (dicts with the API's job fields); returns their ids once Kafka has them all."""
        batch = [dict(j) if "id" in j else {**j, "id": new_job_id()} for j in jobs]
        headers = {"Idempotency-Key": idempotency_key} if idempotency_key else None
        body = await self.request("POST", f"/v1/queues/{queue}/jobs", json={"jobs": batch}, headers=headers)
        return list(body["ids"])

    async def enqueue_one(self, queue: str, kind: str, args: Any = None, **fields: Any) -> dict[str, Any]:
        """One job; returns the gateway's answer for it (id, topic, partition, offset)."""
        job = {"kind": kind, "args": args, "id": fields.pop("id", None) or new_job_id(), **fields}
        body = await self.request("POST", f"/v1/queues/{queue}/jobs", json=job)
        return dict(body["jobs"][0])

    async def get_job(self, queue: str, job_id: str) -> dict[str, Any] | None:
        try:
            return dict(await self.request("GET", f"/v1/queues/{queue}/jobs/{job_id}"))
        except ApiRefused as exc:
            if exc.status == 404:
                return None
            raise

    async def cancel(self, queue: str, job_id: str) -> str:
        return str((await self.request("DELETE", f"/v1/queues/{queue}/jobs/{job_id}"))["outcome"])

    async def queue(self, queue: str) -> dict[str, Any]:
        return dict(await self.request("GET", f"/v1/queues/{queue}"))
