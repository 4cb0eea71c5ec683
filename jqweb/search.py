"""Finding jobs: the search filters (from a URL or a posted form), the live scan over Redis (bounded per
request, resumable by a cursor), the archive search (the history tables), and the jobs a bulk action
applies to.

**States.** ``state`` names where to look, and for finished jobs how they ended:

========================  ==============================  ==========================================
``state=``                live: the lists scanned         a job matches when its state is
========================  ==============================  ==========================================
(none)                    pending, delayed, far,           anything
                          running, done
``pending`` ...           that one list                    anything in it
``done``                  done (every finished job)        completed, canceled, expired or errored
``dead`` / ``errored``    the dead-letter list             errored
``completed`` ...         done                             that one end state
========================  ==============================  ==========================================

In the archive ``state`` is the job's latest recorded state (``dead`` is ``errored``; ``done`` and ``far``
name no one state there and are refused).

**Time.** ``since``/``until`` (ms since the epoch, or ``YYYY-MM-DDTHH:MM[:SS]`` in UTC as a
``datetime-local`` input sends it; ``until`` exclusive) bound the job's ``enqueued_at``, or its
``finished_at`` with ``on=finished``; in the archive, the time of its latest event.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import AsyncGenerator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import orjson

from jqcore.clock import now_ms
from jqcore.envelope import decode
from jqcore.errors import EnvelopeError
from jqcore.events import STATES as EVENT_STATES
from jqengine import Engine, JobInfo
from jqruntime.http import HttpError
from jqruntime.stores.history import HistoryStore, SearchPage

__all__ = [
    "FIELDS",
    "Filters",
    "ScanPage",
    "archive_page",
    "error_summary",
    "job_row",
    "live_page",
    "matching",
    "parse_filters",
    "split_error",
]

FIELDS = ("queue", "state", "kind", "id", "since", "until", "on", "meta", "source")
"""The filter fields, in the order the form shows them (and a bulk form carries them)."""

ALL_LISTS = ("pending", "delayed", "far", "running", "done")
FINISHED = frozenset({"completed", "canceled", "expired", "errored"})
LIVE_STATES: dict[str, tuple[tuple[str, ...], frozenset[str] | None]] = {
    "": (ALL_LISTS, None),
    "pending": (("pending",), None),
    "delayed": (("delayed",), None),
    "far": (("far",), None),
    "running": (("running",), None),
    "done": (("done",), None),
    "dead": (("dead",), None),
    "errored": (("dead",), None),
    "completed": (("done",), frozenset({"completed"})),
    "canceled": (("done",), frozenset({"canceled"})),
    "expired": (("done",), frozenset({"expired"})),
}
"""``state=`` → (the listed states scanned, the job states accepted; None: any)."""
NEWEST = frozenset({"done", "dead"})
"""Lists shown newest first (the most recently finished jobs are the interesting ones)."""
CHUNK = 500
_META_KEY = re.compile(r"[a-z][a-z0-9_]{0,31}")
_MINUTE = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}(:\d{2})?")


@dataclass(frozen=True)
class Filters:
    """A search: what the URL (or a bulk form) asked for, checked."""

    raw: dict[str, str]
    """The fields as given (non-empty ones only): the form's values and the next page's URL."""
    queue: str | None = None
    state: str = ""
    kind: str | None = None
    id: str | None = None
    since: int | None = None
    until: int | None = None
    on: str = "enqueued"
    meta: tuple[str, str] | None = None
    source: str = "live"

    @property
    def lists(self) -> tuple[str, ...]:
        return LIVE_STATES[self.state][0]

    @property
    def accepted(self) -> frozenset[str] | None:
        return LIVE_STATES[self.state][1]

    def describe(self) -> str:
        """``queue=mail state=dead`` (every filter; ``everything`` when none)."""
        shown = [f"{k}={v}" for k, v in self.raw.items() if k != "source" or v != "live"]
        return " ".join(shown) or "everything"

    def matches(self, job: JobInfo) -> bool:
        if self.accepted is not None and job.state not in self.accepted:
            return False
        if self.kind is not None and job.kind != self.kind:
            return False
        if self.id is not None and not job.id.startswith(self.id):
            return False
        return self._in_time(job) and self._meta_matches(job)

    def _in_time(self, job: JobInfo) -> bool:
        if self.since is None and self.until is None:
            return True
        at = job.finished_at if self.on == "finished" else job.enqueued_at
        if at is None:
            return False
        return (self.since is None or at >= self.since) and (self.until is None or at < self.until)

    def _meta_matches(self, job: JobInfo) -> bool:
        if self.meta is None:
            return True
        if job.envelope is None:
            return False
        try:
            meta = decode(job.envelope).meta
        except EnvelopeError:
            return False
        return meta.get(self.meta[0]) == self.meta[1]


def _bad(code: str, name: str, problem: str) -> HttpError:
    return HttpError(400, code, f"{name}: {problem}")


def parse_time(value: str, name: str, code: str) -> int:
    """ms since the epoch, or a ``datetime-local`` value read as UTC."""
    if value.isdigit():
        return int(value)
    if _MINUTE.fullmatch(value):
        return int(datetime.fromisoformat(value).replace(tzinfo=UTC).timestamp() * 1000)
    raise _bad(code, name, f"give ms since the epoch or YYYY-MM-DDTHH:MM (UTC), not {value[:40]!r}")


def _parse_meta(value: str, code: str) -> tuple[str, str]:
    key, sep, val = value.partition("=")
    if not sep or not _META_KEY.fullmatch(key.strip()) or not val.strip():
        raise _bad(code, "meta", f"give key=value (key [a-z][a-z0-9_]*), not {value[:40]!r}")
    return key.strip(), val.strip()


def _check_state(state: str, source: str, code: str) -> str:
    if source == "archive":
        if state == "dead":
            return "errored"
        if (state and state not in EVENT_STATES) or state in ("far", "done"):
            known = ", ".join(s for s in EVENT_STATES if s != "far")
            raise _bad(code, "state", f"the archive knows {known} (and dead), not {state[:40]!r}")
        return state
    if state not in LIVE_STATES:
        raise _bad(code, "state", f"one of {', '.join(s for s in LIVE_STATES if s)}, not {state[:40]!r}")
    return state


def parse_filters(given: Mapping[str, str], code: str = "query_invalid") -> Filters:
    """The filters of a query string or a posted form; 400 ``code`` naming the bad parameter."""
    raw = {k: given[k].strip() for k in FIELDS if given.get(k, "").strip()}
    source = raw.get("source", "live")
    if source not in ("live", "archive"):
        raise _bad(code, "source", f"live or archive, not {source[:40]!r}")
    on = raw.get("on", "enqueued")
    if on not in ("enqueued", "finished"):
        raise _bad(code, "on", f"enqueued or finished, not {on[:40]!r}")
    since, until = (parse_time(raw[n], n, code) if n in raw else None for n in ("since", "until"))
    meta = _parse_meta(raw["meta"], code) if "meta" in raw else None
    if meta is not None and source == "archive":
        raise _bad(code, "meta", "the archive has no meta: search the live jobs (source=live)")
    return Filters(
        raw=raw,
        queue=raw.get("queue"),
        state=_check_state(raw.get("state", ""), source, code),
        kind=raw.get("kind"),
        id=raw.get("id"),
        since=since,
        until=until,
        on=on,
        meta=meta,
        source=source,
    )


# --- showing jobs ---------------------------------------------------------------------------------


def split_error(text: str | None) -> tuple[str, str | None]:
    """(the error's message, its traceback or None): a Python traceback's last line is the message."""
    if not text:
        return "", None
    lines = [line for line in text.strip().splitlines() if line.strip()]
    if len(lines) > 1 and lines[0].startswith("Traceback"):
        return lines[-1], text
    return text.strip(), None


def error_summary(text: str | None, limit: int = 300) -> str:
    message = split_error(text)[0].splitlines()
    first = message[0] if message else ""
    return first if len(first) <= limit else first[: limit - 1] + "…"


ARGS_PREVIEW = 120
"""Characters of a job's arguments (compact JSON) a list shows."""


def args_preview(job: JobInfo) -> str | None:
    """The job's arguments as compact JSON, cut to :data:`ARGS_PREVIEW` characters (None: no envelope in
    Redis, e.g. a far-future job, or one that does not decode)."""
    if job.envelope is None:
        return None
    try:
        text = orjson.dumps(decode(job.envelope).args).decode()
    except (EnvelopeError, TypeError):
        return None
    return text if len(text) <= ARGS_PREVIEW else text[: ARGS_PREVIEW - 1] + "…"


def run_ms(started_at: int | None, finished_at: int | None, state: str, now: int) -> int | None:
    """How long the job ran: its last attempt's start to its end, or to now while it runs."""
    if started_at is None:
        return None
    if finished_at is not None and finished_at >= started_at:
        return finished_at - started_at
    return max(0, now - started_at) if state == "running" else None


def job_row(job: JobInfo, now: int | None = None) -> dict[str, Any]:
    """A job as a list shows it."""
    return {
        "queue": job.queue,
        "id": job.id,
        "state": job.state,
        "kind": job.kind,
        "attempt": job.attempt,
        "max_attempts": job.max_attempts,
        "enqueued_at": job.enqueued_at,
        "run_at": job.run_at,
        "finished_at": job.finished_at,
        "started_at": job.started_at,
        "run_ms": run_ms(job.started_at, job.finished_at, job.state, now if now is not None else now_ms()),
        "args": args_preview(job),
        "reason": job.reason,
        "error": error_summary(job.last_error),
    }


# --- the live scan --------------------------------------------------------------------------------


@dataclass
class ScanPage:
    rows: list[dict[str, Any]] = field(default_factory=list)
    examined: int = 0
    next_cursor: str | None = None
    stopped_at: dict[str, Any] | None = None
    """Where the scan stopped (queue, state, offset) when more is left."""


Segment = tuple[str, str]


async def _queues(engine: Engine, f: Filters) -> list[str]:
    return [f.queue] if f.queue else await engine.reads.queues()


def _segments(queues: Sequence[str], f: Filters) -> list[Segment]:
    return [(q, s) for q in queues for s in f.lists]


def _start(cursor: str | None, segments: Sequence[Segment], code: str = "query_invalid") -> tuple[int, int]:
    """(segment index, offset) of a cursor: a plain offset (into the first list) or ``queue/state/offset``."""
    if not cursor:
        return 0, 0
    if cursor.isdigit():
        return 0, int(cursor)
    queue, _, rest = cursor.partition("/")
    state, _, offset = rest.partition("/")
    if not offset.isdigit() or not queue:
        raise _bad(code, "cursor", "pass back the cursor of the previous page")
    for i, seg in enumerate(segments):
        if seg == (queue, state):
            return i, int(offset)
        if seg[0] > queue:  # that queue is gone: go on with the next one
            return i, 0
    return len(segments), 0


def _cursor(segments: Sequence[Segment], at: tuple[int, int]) -> str | None:
    i, offset = at
    if i >= len(segments):
        return None
    if len(segments) == 1:
        return str(offset)
    queue, state = segments[i]
    return f"{queue}/{state}/{offset}"


async def _fetch(engine: Engine, queue: str, state: str, ids: Sequence[str]) -> list[JobInfo | None]:
    if state == "far":
        return await engine.reads.far_jobs(queue, ids)
    return await engine.reads.get_jobs(queue, ids)


async def _walk(
    engine: Engine, segments: Sequence[Segment], start: tuple[int, int], chunk: int
) -> AsyncGenerator[tuple[JobInfo | None, tuple[int, int]]]:
    """Every job from ``start`` on, with the position after it (None: listed, gone when read)."""
    i, offset = start
    while i < len(segments):
        queue, state = segments[i]
        ids, _ = await engine.reads.list_ids(queue, state, offset, chunk, newest=state in NEWEST)
        for k, job in enumerate(await _fetch(engine, queue, state, ids)):
            yield job, (i, offset + k + 1)
        if len(ids) < chunk:
            i, offset = i + 1, 0
        else:
            offset += len(ids)


async def live_page(engine: Engine, f: Filters, cursor: str | None, limit: int, budget: int) -> ScanPage:
    """Up to ``limit`` matching jobs from ``cursor`` on, examining at most ``budget`` jobs."""
    segments = _segments(await _queues(engine, f), f)
    at = _start(cursor, segments)
    page = ScanPage()
    walk = _walk(engine, segments, at, min(CHUNK, budget))
    async with contextlib.aclosing(walk):
        async for job, after in walk:
            page.examined += 1
            at = after
            if job is not None and f.matches(job):
                page.rows.append(job_row(job))
            if len(page.rows) >= limit or page.examined >= budget:
                break
        else:
            at = (len(segments), 0)
    page.next_cursor = _cursor(segments, at)
    if page.next_cursor is not None:
        page.stopped_at = {"queue": segments[at[0]][0], "state": segments[at[0]][1], "offset": at[1]}
    return page


async def matching(
    engine: Engine, f: Filters, wanted: frozenset[str], most: int
) -> tuple[list[JobInfo], int]:
    """Every live job matching ``f`` whose state is in ``wanted`` (what a bulk action changes), stopping
    once more than ``most`` were found; and how many matched the filters at all."""
    segments = _segments(await _queues(engine, f), f)
    found: list[JobInfo] = []
    matched = 0
    walk = _walk(engine, segments, (0, 0), CHUNK)
    async with contextlib.aclosing(walk):
        async for job, _ in walk:
            if job is None or not f.matches(job):
                continue
            matched += 1
            if job.state in wanted:
                found.append(job)
                if len(found) > most:
                    break
    return found, matched


# --- the archive ----------------------------------------------------------------------------------


async def archive_page(
    history: HistoryStore,
    f: Filters,
    cursor: str | None,
    limit: int,
    run: Callable[[Callable[[], SearchPage]], Awaitable[SearchPage]],
) -> tuple[list[dict[str, Any]], str | None]:
    """A page of the history tables' jobs (latest change first) and the next page's cursor; ``run`` runs
    the query (the dashboard's history pool)."""
    page = await run(
        lambda: history.search(
            queue=f.queue,
            kind=f.kind,
            state=f.state or None,
            since_ms=f.since,
            until_ms=f.until,
            id_prefix=f.id,
            limit=limit,
            after=cursor,
        )
    )
    rows = [
        {
            "queue": j.queue,
            "id": j.id,
            "state": j.to_state,
            "kind": j.kind,
            "attempt": j.attempt,
            "max_attempts": None,
            "enqueued_at": j.accepted_at or j.first_at,
            "run_at": j.run_at or None,
            "finished_at": j.at_ms,
            "started_at": None,
            "run_ms": None,
            "args": None,
            "reason": None,
            "error": error_summary(j.message) if j.error else "",
        }
        for j in page.jobs
    ]
    return rows, page.next_cursor
