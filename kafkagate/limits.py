"""The gateway process's own limits: the refusal they share (429 ``gateway_busy``) and the budget of
request body bytes being read and handled at once (``JOBQ_GATE_INFLIGHT_BODY_BYTES``).

A limit of this process is not a backend failure: it is a 429 with ``Retry-After`` (another gateway, or
this one a moment later, can take the request), never a 503 naming Redis or Kafka. A request that could
never fit a limit is a 413 instead, and is not told to retry.
"""

from __future__ import annotations

from aiohttp import web

from jqruntime.http import HttpError

__all__ = ["BODY_BUDGET", "BodyBudget", "busy"]


def busy(what: str, retry_after_s: int = 1) -> HttpError:
    """429 ``gateway_busy`` with ``Retry-After``: this gateway process is at one of its own limits."""
    error = HttpError(
        429, "gateway_busy", f"the gateway is at its limit of {what}; retry later", details={"limit": what}
    )
    error.headers = {"Retry-After": str(retry_after_s)}
    return error


class BodyBudget:
    """Request body bytes held at once by one gateway process (received, and again once decompressed,
    until the request is answered)."""

    def __init__(self, total: int) -> None:
        self.total = total
        self.used = 0

    def take(self, n: int) -> int:
        """Hold ``n`` more bytes; 413 ``body_too_large`` when ``n`` alone exceeds the budget (it never
        fits), 429 ``gateway_busy`` when the bytes held now leave no room. Returns ``n`` (for
        :meth:`give`)."""
        if n > self.total:
            message = f"the body needs {n} bytes; this gateway holds at most {self.total} bytes of bodies"
            raise HttpError(413, "body_too_large", message, details={"limit_bytes": self.total})
        if self.used + n > self.total:
            raise busy(f"{self.total} bytes of request bodies in flight (JOBQ_GATE_INFLIGHT_BODY_BYTES)")
        self.used += n
        return n

    def give(self, n: int) -> None:
        self.used -= n


BODY_BUDGET = web.AppKey("jobq.body_budget", BodyBudget)
