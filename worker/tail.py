"""Tail calls (Chapman's): a running handler hands its job's completion to a job it spawns.

::

    @jobs.job("report.build")
    async def build(report_id: int) -> None:
        rows = await fetch(report_id)
        defer_to(render.message(rows), queue=render.queue)

``defer_to`` ends the handler (it raises :class:`Deferred`, like ``Retry``). The job does not complete
then: it waits in state ``deferred`` — no lease, no worker slot — until the spawned job finishes, and
ends with that job's outcome: completed with its result, or, when the child ends errored, canceled or
expired, by ``on_failure``: ``"fail"`` (errored with the child's reason, never retried) or ``"retry"``
(retried like a failed attempt). A child may defer in turn (a chain). The child gets an id of jobq's
(``tail@...``) and may be on another queue; the hand-offs are crash-safe (:mod:`jqengine.tails`).
Only ``async`` and ``thread`` handlers can defer (a ``process`` handler has no job context).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal, NoReturn

from jqcore.envelope import Envelope, new_envelope, new_job_id
from jqcore.errors import HandlerControl
from jqengine import TAIL_ID_PREFIX
from worker.registry import current_job

__all__ = ["Deferred", "Policy", "defer_to"]

Policy = Literal["fail", "retry"]
_OPTIONS = frozenset(
    {"priority", "run_at", "delay_ms", "expires_at", "max_attempts", "lease_ms", "meta", "excl"}
)


class Deferred(HandlerControl):
    """Raised by :func:`defer_to`: the job's completion is handed to ``child``."""

    def __init__(self, child: Envelope, on_failure: Policy) -> None:
        super().__init__(f"deferred to {child.queue}/{child.id}")
        self.child = child
        self.on_failure = on_failure


def defer_to(job: Mapping[str, Any], *, queue: str | None = None, on_failure: Policy = "fail") -> NoReturn:
    """Spawn ``job`` (``{"kind": ..., "args": ...}`` plus any of ``priority``, ``delay_ms``, ``run_at``,
    ``expires_at``, ``max_attempts``, ``lease_ms``, ``meta``, ``excl``; ``JobSpec.message`` makes one) on
    ``queue`` (default: the running job's) and hand it this job's completion. Never returns."""
    ctx = current_job()  # LookupError outside a handler
    if on_failure not in ("fail", "retry"):
        raise ValueError(f"on_failure must be 'fail' or 'retry', not {on_failure!r}")
    options = dict(job)
    kind, args = options.pop("kind", None), options.pop("args", None)
    unknown = sorted(set(options) - _OPTIONS)
    if not isinstance(kind, str) or unknown:
        raise ValueError(f"defer_to needs a job with a kind and known options (unknown: {unknown})")
    child = new_envelope(queue or ctx.queue, kind, args, id=f"{TAIL_ID_PREFIX}{new_job_id()}", **options)
    raise Deferred(child, on_failure)
