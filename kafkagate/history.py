"""The archive (Rickover): what the gateway answers from the history tables once Redis forgot a job, and
the job search over them (``docs/history.md``).

The tables are read through DuckDB (``jqruntime.stores.history``), never a Spark session, on the gateway's
history pool (``jqruntime.historypool``: ``JOBQ_HISTORY_QUERY_SLOTS`` queries at once, half of them per
token, a time limit each; past it a 429 ``gateway_busy``), never the executor ``/readyz`` uses. A ``GET``
the history had no job for is remembered a few seconds (``jqruntime.historypool.MISS_TTL_S``).
The search covers every job the history has seen — live ones too, as of the history pipeline's last trigger
(seconds behind Redis); ``GET`` of one job answers from Redis whenever Redis still has it. ``GET`` of an
archived job shows the payload the history kept with its end (``jqruntime.stores.archive``: args, meta,
result, priority, lease, expiry; ``truncated`` names a field cut to the cap); the search pages leave it out.
"""

from __future__ import annotations

from aiohttp import web

from jqruntime.authz import Policy
from jqruntime.http import HttpError, json_response
from kafkagate import models as m
from kafkagate.api import Api, Param
from kafkagate.archive import asker, job_dict
from kafkagate.auth import search_queue
from kafkagate.state import GATE

__all__ = ["routes"]

routes = Api()

MAX_LIMIT = 500


def _int(request: web.Request, name: str) -> int | None:
    raw = request.query.get(name)
    if raw is None or raw == "":
        return None
    try:
        return int(raw)
    except ValueError:
        msg = f"{name} must be an integer (ms since the epoch), not {raw!r}"
        raise HttpError(400, "query_invalid", msg) from None


@routes.get(
    "/v1/jobs",
    policy=Policy("read", (search_queue,)),
    summary="jobs the history has seen (live as of its last trigger, and archived), newest change first",
    answer=m.JobPage,
    params=(
        Param("queue", "query", {"type": "string"}),
        Param("kind", "query", {"type": "string"}),
        Param("state", "query", {"type": "string"}),
        Param("since", "query", {"type": "integer"}, "ms since the epoch, inclusive"),
        Param("until", "query", {"type": "integer"}, "ms since the epoch, exclusive"),
        Param("id_prefix", "query", {"type": "string"}),
        Param("limit", "query", {"type": "integer", "minimum": 1, "maximum": MAX_LIMIT}),
        Param("after", "query", {"type": "string"}, "the previous page's next"),
    ),
    errors={
        400: "query_invalid: a bad filter or cursor",
        403: "queue_forbidden: a token limited to some queues must name one (?queue=)",
        404: "history_missing: no history tables here",
    },
)
async def search_jobs(request: web.Request) -> web.Response:
    """Jobs the history has seen, newest change first, filtered by queue, kind, state, time range (ms,
    ``since`` inclusive, ``until`` exclusive) and id prefix; paged by ``after`` (the previous page's
    ``next``)."""
    store = request.app[GATE].history()
    if store is None:
        raise HttpError(
            404, "history_missing", "no history tables here (JOBQ_HISTORY_PATH, `jobq history run`)"
        )
    given = _int(request, "limit")
    limit = 50 if given is None else given
    if not 1 <= limit <= MAX_LIMIT:
        raise HttpError(400, "query_invalid", f"limit must be 1..{MAX_LIMIT}, not {limit}")
    q = request.query
    since, until = _int(request, "since"), _int(request, "until")
    gate = request.app[GATE]
    page = await gate.history_pool().run(  # a bad cursor: QueryInvalid, a 400 like every JobqError
        asker(request),
        lambda: store.search(
            queue=q.get("queue") or None,
            kind=q.get("kind") or None,
            state=q.get("state") or None,
            since_ms=since,
            until_ms=until,
            id_prefix=q.get("id_prefix") or None,
            limit=limit,
            after=q.get("after") or None,
        ),
    )
    return json_response({"jobs": [job_dict(j) for j in page.jobs], "next": page.next_cursor})
