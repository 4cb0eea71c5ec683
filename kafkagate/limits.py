"""The gateway process's own limits: the refusal they share (429 ``gateway_busy``) and the budget of
request body bytes being read and handled at once (``JOBQ_GATE_INFLIGHT_BODY_BYTES``).

Each limit of the process (long-poll slots, body bytes in flight, Redis connections) is also held at most
``JOBQ_GATE_TOKEN_SHARE`` (half by default, :func:`share_of`) by one token at once: past its share a token
gets the same 429 ``gateway_busy`` while the other tokens still get in (review M7).

A limit of this process is not a backend failure: it is a 429 with ``Retry-After`` (another gateway, or
this one a moment later, can take the request), never a 503 naming Redis or Kafka. A request that could
never fit a limit is a 413 instead, and is not told to retry.
"""

from __future__ import annotations

from aiohttp import web

from jqruntime.http import HttpError

__all__ = ["BODY_BUDGET", "BodyBudget", "busy", "share_of"]


def busy(what: str, retry_after_s: int = 1) -> HttpError:
    """429 ``gateway_busy`` with ``Retry-After``: this gateway process is at one of its own limits."""
    error = HttpError(
        429, "gateway_busy", f"the gateway is at its limit of {what}; retry later", details={"limit": what}
    )
    error.headers = {"Retry-After": str(retry_after_s)}
    return error


def share_of(limit: int, share: float) -> int:
    """One token's part of a process limit (``JOBQ_GATE_TOKEN_SHARE``): at least 1."""
    return max(1, int(limit * share))


class BodyBudget:
    """Request body bytes held at once by one gateway process (received, and again once decompressed,
    until the request is answered), and by one holder (a token's name) at most ``per_holder`` of them."""

    def __init__(self, total: int, per_holder: int | None = None) -> None:
        self.total = total
        self.per_holder = total if per_holder is None else per_holder
        self.used = 0
        self._by_holder: dict[str, int] = {}

    def held_by(self, holder: str) -> int:
        return self._by_holder.get(holder, 0)

    def take(self, n: int, holder: str | None = None) -> int:
        """Hold ``n`` more bytes (for ``holder``: None counts in the total only); 413 ``body_too_large``
        when ``n`` alone exceeds the budget or the holder's share of it (it never fits), 429
        ``gateway_busy`` when the bytes held now — by everyone, or by this holder — leave no room. Returns
        ``n`` (for :meth:`give`)."""
        limit = self.total if holder is None else min(self.total, self.per_holder)
        if n > limit:
            whose = "" if limit == self.total else " for one token (JOBQ_GATE_TOKEN_SHARE of the budget)"
            message = f"the body needs {n} bytes; this gateway holds at most {limit} bytes of bodies{whose}"
            raise HttpError(413, "body_too_large", message, details={"limit_bytes": limit})
        if self.used + n > self.total:
            raise busy(f"{self.total} bytes of request bodies in flight (JOBQ_GATE_INFLIGHT_BODY_BYTES)")
        if holder is not None:
            mine = self._by_holder.get(holder, 0)
            if mine + n > self.per_holder:
                raise busy(
                    f"{self.per_holder} bytes of request bodies in flight for one token "
                    "(JOBQ_GATE_TOKEN_SHARE of JOBQ_GATE_INFLIGHT_BODY_BYTES)"
                )
            self._by_holder[holder] = mine + n
        self.used += n
        return n

    def give(self, n: int, holder: str | None = None) -> None:
        self.used -= n
        if holder is not None and n:
            left = self._by_holder.get(holder, 0) - n
            if left > 0:
                self._by_holder[holder] = left
            else:
                self._by_holder.pop(holder, None)


BODY_BUDGET = web.AppKey("jobq.body_budget", BodyBudget)
