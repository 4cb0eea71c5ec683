"""The gateway process's own limits: the refusal they share (429 ``gateway_busy``), the budget of
request body bytes being read and handled at once (``JOBQ_GATE_INFLIGHT_BODY_BYTES``), and the limits of
the open dispatch callback routes (:class:`CallbackLimits`: their own small body limit, budget and read
timeout, and a rate per source address), which never touch the shared budget.

Each limit of the process (long-poll slots, body bytes in flight, Redis connections) is also held at most
``JOBQ_GATE_TOKEN_SHARE`` (half by default, :func:`share_of`) by one token at once: past its share a token
gets the same 429 ``gateway_busy`` while the other tokens still get in (review M7).

A limit of this process is not a backend failure: it is a 429 with ``Retry-After`` (another gateway, or
this one a moment later, can take the request), never a 503 naming Redis or Kafka. A request that could
never fit a limit is a 413 instead, and is not told to retry.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from dataclasses import dataclass, field

from aiohttp import web

from jqcore.buckets import Bucket, Rate, retry_after
from jqengine import MAX_RESULT_BYTES
from jqruntime.http import HttpError

__all__ = [
    "BODY_BUDGET",
    "CALLBACK_LIMITS",
    "CALLBACK_MAX_BODY_BYTES",
    "CALLBACK_PREFIX",
    "AddressBuckets",
    "BodyBudget",
    "CallbackLimits",
    "busy",
    "share_of",
]

CALLBACK_PREFIX = "/v1/callbacks/"
"""The open dispatch callback routes (``kafkagate.callbacks``): no bearer token, their own limits."""
CALLBACK_MAX_BODY_BYTES = 64 * 1024 + MAX_RESULT_BYTES
"""A callback's body: a token, an error or a result of at most ``MAX_RESULT_BYTES``, and 64 KiB of room."""


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

    def __init__(
        self, total: int, setting: str = "JOBQ_GATE_INFLIGHT_BODY_BYTES", *, per_holder: int | None = None
    ) -> None:
        self.total = total
        self.per_holder = total if per_holder is None else per_holder
        self.used = 0
        self.setting = setting
        """The setting that sizes it (named in a refusal)."""
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
            whose = "" if limit == self.total else f" for one token (JOBQ_GATE_TOKEN_SHARE of {self.setting})"
            message = f"the body needs {n} bytes; this gateway holds at most {limit} bytes of bodies{whose}"
            raise HttpError(413, "body_too_large", message, details={"limit_bytes": limit})
        if self.used + n > self.total:
            raise busy(f"{self.total} bytes of request bodies in flight ({self.setting})")
        if holder is not None:
            mine = self._by_holder.get(holder, 0)
            if mine + n > self.per_holder:
                raise busy(
                    f"{self.per_holder} bytes of request bodies in flight for one token "
                    f"(JOBQ_GATE_TOKEN_SHARE of {self.setting})"
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


class AddressBuckets:
    """A token bucket per source address, at most ``max_addresses`` of them (the least recently seen is
    forgotten first: a full bucket, most likely)."""

    def __init__(self, rate: Rate, max_addresses: int = 10_000) -> None:
        self.rate = rate
        self.max_addresses = max_addresses
        self._buckets: OrderedDict[str, Bucket] = OrderedDict()

    def take(self, address: str, now: float) -> float:
        """Spend one request of ``address``: 0.0 when allowed, else the seconds until one will be."""
        bucket = self._buckets.pop(address, None) or Bucket(self.rate)
        self._buckets[address] = bucket
        while len(self._buckets) > self.max_addresses:
            self._buckets.popitem(last=False)
        return bucket.take(now)


@dataclass
class CallbackLimits:
    """The open callback routes' own limits (``JOBQ_GATE_CALLBACK_*``), apart from the shared ones so that
    unauthenticated senders cannot take what enqueues and claims need: a body of at most
    :data:`CALLBACK_MAX_BODY_BYTES`, read within ``read_timeout_s``, held against a budget of their own,
    and at most ``rate`` requests per source address (None: no rate)."""

    budget: BodyBudget
    read_timeout_s: float
    rate: Rate | None = None
    max_body_bytes: int = CALLBACK_MAX_BODY_BYTES
    buckets: AddressBuckets | None = field(init=False, default=None)

    def __post_init__(self) -> None:
        if self.rate is not None:
            self.buckets = AddressBuckets(self.rate)

    def admit(self, address: str | None) -> None:
        """Spend one request of this source address: 429 ``rate_limited`` with ``Retry-After`` past it."""
        if self.buckets is None:
            return
        wait = self.buckets.take(address or "unknown", time.monotonic())
        if wait > 0:
            after = retry_after(wait)
            limited = HttpError(
                429,
                "rate_limited",
                f"too many callbacks from this address (over {self.rate} per gateway process); retry in"
                f" {after} s",
                details={"rate": str(self.rate), "retry_after_s": int(after)},
            )
            limited.headers["Retry-After"] = after
            raise limited


CALLBACK_LIMITS = web.AppKey("jobq.callback_limits", CallbackLimits)
