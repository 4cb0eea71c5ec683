"""Reading the history tables with DuckDB (``docs/history.md``): no Spark, no server, one in-process query.

``jobq history run`` (``jqspark.history``) writes two folders of plain Parquet under the history root:

* ``events/day=YYYY-MM-DD/batch=<tag>/part-*.parquet``: every lifecycle event, one folder per UTC day and
  micro-batch;
* ``current/seg=<b|c><tag>/part-*.parquet``: the latest event of each job in a batch (``b``) or in a
  compaction of many segments (``c``).

Spark's Kafka reads are at least once and a replayed batch may land beside its first copy, so the files
may hold an event (or a job's latest row) more than once. Every view below deduplicates: ``events`` keeps
one row per ``(queue, id, v)`` and ``current`` the highest ``v`` per ``(queue, id)``. Any superset of the
rows the pipeline meant to write gives the same answers, which is what makes the history exactly once as
seen by its readers.

Column names. DuckDB's parser reserves ``FROM``, ``TO`` and ``AT``, so the event fields ``from``, ``to``
and ``at`` are the columns ``from_state``, ``to_state`` and ``at_ms`` in the tables and the views (see
:data:`COLUMN_OF`); every other field keeps its name.

Each call opens its own in-memory DuckDB connection (safe from any thread: the gateway calls this from an
executor), binds the views to the files present at that moment and answers. The connection may read the
history root and nothing else, and :meth:`HistoryStore.query` runs a single ``SELECT`` only.

Bounds (:class:`QueryLimits`, from ``JOBQ_HISTORY_QUERY_*``): each connection gets a ``memory_limit``, a
number of ``threads`` and a temporary folder of bounded size before its configuration is locked (DuckDB's
own defaults are 80 % of the machine's memory and every core, per connection); a query running past
``timeout_s`` is interrupted (:class:`~jqcore.errors.QueryTimeout`). How many run at once is the servers'
business (``jqruntime.historypool``).
"""

from __future__ import annotations

import base64
import binascii
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, NamedTuple, TypeVar

import orjson

from jqcore.errors import BackendUnavailable, QueryInvalid, QueryTimeout
from jqcore.events import FIELDS, PAYLOAD_FIELDS
from jqcore.extras import require
from jqcore.settings.pipeline import HistorySettings
from jqruntime.stores.archive import ArchivedPayload

if TYPE_CHECKING:  # the history extra's; imported where a table is read
    import duckdb

__all__ = [
    "COLUMN_OF",
    "CURRENT_COLUMNS",
    "CURRENT_DIR",
    "CURRENT_GLOB",
    "EVENTS_DIR",
    "EVENTS_GLOB",
    "EVENT_COLUMNS",
    "PAYLOAD_COLUMNS",
    "VIEWS",
    "EventRow",
    "HistoryStore",
    "JobSnapshot",
    "QueryLimits",
    "Rows",
    "SearchPage",
    "TimelineEntry",
]

COLUMN_OF: Final[dict[str, str]] = {"from": "from_state", "to": "to_state", "at": "at_ms"}
"""Event field -> table column, for the fields whose own name is a DuckDB keyword."""

EVENT_COLUMNS: Final[tuple[tuple[str, type], ...]] = tuple((COLUMN_OF.get(n, n), t) for n, t in FIELDS)
"""The columns of an event row in the tables, in :data:`jqcore.events.FIELDS` order."""

CURRENT_COLUMNS: Final[tuple[tuple[str, type], ...]] = (*EVENT_COLUMNS, ("first_at", int))
"""The columns of a ``current`` row: the job's latest event, except ``accepted_at`` (the job's, from its
enqueue event), plus ``first_at`` (its first event's ``at``)."""

PAYLOAD_COLUMNS: Final[tuple[tuple[str, type], ...]] = PAYLOAD_FIELDS
"""The payload columns (``jqcore.events.PAYLOAD_FIELDS``, same names) after the event's own, in both tables:
set on the events that end a job, ``""`` on the others; NULL in files written before the history kept
payloads (the views read such files as well)."""

EVENTS_DIR: Final = "events"
CURRENT_DIR: Final = "current"
EVENTS_GLOB: Final = f"{EVENTS_DIR}/day=*/batch=*/*.parquet"
CURRENT_GLOB: Final = f"{CURRENT_DIR}/seg=*/*.parquet"

VIEWS: Final = ("events", "current", "job_states", "jobs")
"""The views a query can use (``docs/history.md`` lists their columns)."""

_SQL_TYPE = {str: "VARCHAR", int: "BIGINT"}
_ATTEMPTS = 3  # a compaction or retention pass may delete files between the listing and the read
_T = TypeVar("_T")
_REPORT_BY = ("kind", "queue")
_REPORT_PER = ("minute", "hour", "day")
_MAX_PAGE = 1000
_SUMMARY = (*(c for c, _ in CURRENT_COLUMNS),)


SPILL_DIR = "jobq-history-spill"
"""The temporary folder's name under the system's one when ``JOBQ_HISTORY_QUERY_TEMP_DIR`` is unset."""
_INTERRUPT_EVERY_S = 0.05


@dataclass(frozen=True, slots=True)
class QueryLimits:
    """What one history query may use: DuckDB's ``memory_limit`` (MiB), ``threads``, the folder it spills
    to and how much of it (MiB), and how long it may run (``None``: no limit, the CLI's)."""

    memory_mb: int = 256
    threads: int = 1
    temp_dir: Path | None = None
    temp_max_mb: int = 1024
    timeout_s: float | None = None

    @classmethod
    def of(cls, settings: HistorySettings, *, timeout: bool = True) -> QueryLimits:
        """The limits ``JOBQ_HISTORY_QUERY_*`` set; ``timeout=False`` leaves out the time limit (the CLI:
        an operator's own query in their own process)."""
        return cls(
            memory_mb=settings.query_memory_mb,
            threads=settings.query_threads,
            temp_dir=Path(settings.query_temp_dir).expanduser() if settings.query_temp_dir else None,
            temp_max_mb=settings.query_temp_max_mb,
            timeout_s=settings.query_timeout_s if timeout else None,
        )

    def spill_dir(self) -> Path:
        return self.temp_dir if self.temp_dir is not None else Path(tempfile.gettempdir()) / SPILL_DIR

    def statements(self) -> list[str]:
        """The ``SET`` statements of these limits (run before the connection's configuration is locked)."""
        return [
            f"SET memory_limit = '{int(self.memory_mb)}MiB'",
            f"SET threads = {int(self.threads)}",
            f"SET temp_directory = {_literal(str(self.spill_dir()))}",
            f"SET max_temp_directory_size = '{int(self.temp_max_mb)}MiB'",
            "SET enable_progress_bar = false",  # a slow query would draw one on the server's stderr
        ]


class _Deadline:
    """Interrupts a connection's running statement once ``timeout_s`` passed (again every 50 ms until the
    work stops: a statement that started after the first interrupt is stopped too)."""

    def __init__(self, con: duckdb.DuckDBPyConnection, timeout_s: float) -> None:
        self.fired = False
        self._con, self._timeout_s = con, timeout_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="jobq-history-deadline", daemon=True)
        self._thread.start()

    def _watch(self) -> None:
        if self._stop.wait(self._timeout_s):
            return
        self.fired = True
        while True:
            self._con.interrupt()
            if self._stop.wait(_INTERRUPT_EVERY_S):
                return

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


class Rows(NamedTuple):
    """A table answer: column names and rows (tuples of Python values)."""

    columns: list[str]
    rows: list[tuple[Any, ...]]


@dataclass(frozen=True, slots=True)
class EventRow:
    """The columns of one event as the tables hold them (``jqcore.events`` with ``from``/``to``/``at``
    renamed, see :data:`COLUMN_OF`)."""

    id: str
    queue: str
    kind: str
    from_state: str
    to_state: str
    v: int
    at_ms: int
    attempt: int
    worker: str
    error: str
    digest: str
    message: str
    run_at: int
    origin: str
    accepted_at: int


@dataclass(frozen=True, slots=True)
class TimelineEntry(EventRow):
    """One event of a job, with how long the job stayed in the state it entered (``None``: the latest)."""

    duration_ms: int | None


@dataclass(frozen=True, slots=True)
class JobSnapshot(EventRow):
    """A job as its latest recorded event left it (a row of the ``current`` view), with the payload that
    event carries (:meth:`HistoryStore.current`; a :meth:`HistoryStore.search` leaves it out: ``""``)."""

    first_at: int
    args: str | None = ""
    meta: str | None = ""
    result: str | None = ""
    envelope: str | None = ""
    truncated: str | None = ""

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    def payload(self) -> ArchivedPayload:
        """The payload columns, parsed (``kept`` is False when the history has no payload of the job)."""
        return ArchivedPayload.from_columns(self.args, self.meta, self.result, self.envelope, self.truncated)


@dataclass(frozen=True, slots=True)
class SearchPage:
    """A page of :meth:`HistoryStore.search`: ``next_cursor`` (opaque) fetches the next page, ``None`` at
    the end."""

    jobs: list[JobSnapshot]
    next_cursor: str | None


def _names(cls: type[Any]) -> list[str]:
    return [f.name for f in fields(cls)]


def _literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _files_view(
    name: str, root: Path, glob: str, columns: Sequence[tuple[str, type]], hive_cols: dict[str, str]
) -> str:
    """A view over the Parquet files of one table (plus its folder names' columns, ``hive_cols``: name
    -> SQL type), or an empty one of the same columns when there are no files yet (DuckDB refuses a glob
    that matches nothing). The files are united by name with an empty row set of every column, so a
    column no file has yet (the payload, in files written before it was kept) reads as NULL."""
    cols = ", ".join(f'"{c}"' for c, _ in columns)
    typed = [f'CAST(NULL AS {_SQL_TYPE[t]}) AS "{c}"' for c, t in columns]
    typed += [f'CAST(NULL AS {t}) AS "{c}"' for c, t in hive_cols.items()]
    empty = f"SELECT {', '.join(typed)} WHERE false"
    if next(root.glob(glob), None) is None:
        return f"CREATE VIEW {name} AS {empty}"
    types = ", ".join(f"'{c}': {t}" for c, t in hive_cols.items())
    source = (
        f"read_parquet({_literal(str(root / glob))}, hive_partitioning = true, union_by_name = true, "
        f"hive_types = {{{types}}})"
    )
    return (
        f"CREATE VIEW {name} AS SELECT {cols}, {', '.join(hive_cols)} "
        f"FROM (SELECT * FROM {source} UNION ALL BY NAME {empty})"
    )


def _current_sql(where: str = "") -> str:
    """The highest version of each job among the ``current_files`` rows matching ``where`` (a condition on
    the partition columns only — queue, id, kind — so every version of a matching job is kept); first_at
    and accepted_at over every copy (min / max are the same over any superset of the rows). Of two copies
    of the latest version, one with a payload wins."""
    latest_cols = ", ".join(
        "max(accepted_at) OVER job AS accepted_at" if c == "accepted_at" else f'"{c}"'
        for c, _ in EVENT_COLUMNS
    )
    payload_cols = ", ".join(f'"{c}"' for c, _ in PAYLOAD_COLUMNS)
    return f"""SELECT * EXCLUDE (_rank) FROM (
              SELECT {latest_cols}, min(first_at) OVER job AS first_at, {payload_cols},
                     row_number() OVER (
                       PARTITION BY queue, id ORDER BY v DESC, envelope DESC NULLS LAST
                     ) AS _rank
              FROM current_files {f"WHERE {where}" if where else ""} WINDOW job AS (PARTITION BY queue, id)
            ) WHERE _rank = 1"""


def _events_sql(where: str = "") -> str:
    """Any one copy of each event (the copies are equal), of the jobs matching ``where`` (on queue/id)."""
    event_cols = ", ".join(f'"{c}"' for c, _ in (*EVENT_COLUMNS, *PAYLOAD_COLUMNS))
    return f"SELECT DISTINCT ON (queue, id, v) {event_cols}, day FROM events_files" + (
        f" WHERE {where}" if where else ""
    )


def _job_states_sql(events: str) -> str:
    """Each event of ``events`` (a table or a subquery) with the time until the job's next one."""
    return f"""SELECT *,
              lead(at_ms) OVER (PARTITION BY queue, id ORDER BY v) AS next_at,
              lead(at_ms) OVER (PARTITION BY queue, id ORDER BY v) - at_ms AS duration_ms
            FROM {events}"""


def _view_sql(root: Path) -> list[str]:
    return [
        _files_view(
            "events_files",
            root,
            EVENTS_GLOB,
            (*EVENT_COLUMNS, *PAYLOAD_COLUMNS),
            {"day": "DATE", "batch": "VARCHAR"},
        ),
        _files_view(
            "current_files", root, CURRENT_GLOB, (*CURRENT_COLUMNS, *PAYLOAD_COLUMNS), {"seg": "VARCHAR"}
        ),
        f"CREATE VIEW events AS {_events_sql()}",
        f"CREATE VIEW current AS {_current_sql()}",
        f"CREATE VIEW job_states AS {_job_states_sql('events')}",
        """CREATE VIEW jobs AS SELECT *,
              first_run_at - coalesce(accepted_at, first_at) AS wait_ms
            FROM (
              SELECT queue, id, arg_max(kind, v) AS kind, arg_max(to_state, v) AS state, max(v) AS v,
                     min(at_ms) AS first_at, max(at_ms) AS last_at,
                     nullif(max(accepted_at), 0) AS accepted_at,
                     min(at_ms) FILTER (WHERE to_state = 'running') AS first_run_at,
                     max(attempt) AS attempts, count(*) FILTER (WHERE error <> '') AS errors,
                     sum(duration_ms) FILTER (WHERE to_state = 'running') AS run_ms
              FROM job_states GROUP BY queue, id
            )""",
    ]


def _conditions(pairs: Sequence[tuple[str, Any]]) -> tuple[list[str], list[Any]]:
    """The SQL conditions whose value is given, and their parameters in order."""
    given = [(cond, value) for cond, value in pairs if value is not None]
    return [c for c, _ in given], [v for _, v in given]


def _encode_cursor(at_ms: int, queue: str, job_id: str) -> str:
    return base64.urlsafe_b64encode(orjson.dumps([at_ms, queue, job_id])).decode()


def _decode_cursor(cursor: str) -> tuple[int, str, str]:
    try:
        at_ms, queue, job_id = orjson.loads(base64.urlsafe_b64decode(cursor.encode()))
        if isinstance(at_ms, int) and isinstance(queue, str) and isinstance(job_id, str):
            return at_ms, queue, job_id
    except (binascii.Error, orjson.JSONDecodeError, ValueError, TypeError):
        pass
    raise QueryInvalid(f"bad cursor {cursor[:40]!r}: pass back the next_cursor of the previous page")


class HistoryStore:
    """The history tables under ``root`` (``HistorySettings().root``), read through DuckDB views, each
    query within ``limits`` (default: :class:`QueryLimits`' own, 256 MB and one thread, no time limit)."""

    def __init__(self, root: Path, limits: QueryLimits | None = None) -> None:
        require("the job history", "history")
        self.root = Path(root).resolve()
        self.limits = limits if limits is not None else QueryLimits()

    # --- plumbing ----------------------------------------------------------------------------------

    def _connect(self) -> duckdb.DuckDBPyConnection:
        import duckdb

        con = duckdb.connect(
            ":memory:", config={"autoinstall_known_extensions": False, "autoload_known_extensions": False}
        )
        try:
            for sql in self.limits.statements():
                con.execute(sql)
            for sql in _view_sql(self.root):
                con.execute(sql)
            # from here on the connection reads the history root only and cannot be reconfigured
            con.execute(f"SET allowed_directories = [{_literal(str(self.root) + '/')}]")
            con.execute("SET enable_external_access = false")
            con.execute("SET lock_configuration = true")
        except BaseException:
            con.close()
            raise
        return con

    def _run(self, work: Callable[[duckdb.DuckDBPyConnection], _T]) -> _T:
        """``work`` on a fresh connection, again when a file vanished under it (a compaction or retention
        pass deletes files the glob had listed; the next listing no longer has them); interrupted once
        ``limits.timeout_s`` passed since the first try (:class:`~jqcore.errors.QueryTimeout`)."""
        import duckdb

        timeout_s = self.limits.timeout_s
        ends = None if timeout_s is None else time.monotonic() + timeout_s
        for attempt in range(_ATTEMPTS):
            deadline: _Deadline | None = None
            try:
                con = self._connect()
                try:
                    if ends is not None:
                        deadline = _Deadline(con, max(0.0, ends - time.monotonic()))
                    return work(con)
                finally:
                    if deadline is not None:
                        deadline.stop()
                    con.close()
            except duckdb.InterruptException as exc:
                raise self._timed_out() from exc
            except duckdb.IOException as exc:
                if deadline is not None and deadline.fired:
                    raise self._timed_out() from exc
                if attempt == _ATTEMPTS - 1:
                    raise BackendUnavailable(f"history tables changing under the read: {exc}") from exc
        raise AssertionError("unreachable")

    def _timed_out(self) -> QueryTimeout:
        return QueryTimeout(
            f"the history query ran past its {self.limits.timeout_s:g} s limit (JOBQ_HISTORY_QUERY_TIMEOUT_S)"
            " and was stopped: narrow it (a queue, a kind, a time range)"
        )

    def _rows(self, sql: str, params: Sequence[Any] = ()) -> Rows:
        def work(con: duckdb.DuckDBPyConnection) -> Rows:
            cur = con.execute(sql, list(params))
            return Rows([d[0] for d in cur.description or ()], cur.fetchall())

        return self._run(work)

    # --- jobs --------------------------------------------------------------------------------------

    def timeline(self, job_id: str, queue: str | None = None) -> list[TimelineEntry]:
        """Every recorded event of the job (in every queue holding that id unless ``queue`` is given),
        ordered by queue then version, each with the time until the next one."""
        cols = ", ".join(_names(TimelineEntry))
        where, params = "id = ?", [job_id]
        if queue is not None:
            where, params = "id = ? AND queue = ?", [job_id, queue]
        states = _job_states_sql(f"({_events_sql(where)})")  # filtered before the window: one job's rows
        got = self._rows(f"SELECT {cols} FROM ({states}) ORDER BY queue, v", params)
        return [TimelineEntry(*row) for row in got.rows]

    def current(self, queue: str, job_id: str) -> JobSnapshot | None:
        """The job's latest recorded state, ``None`` when the history has no event of it."""
        cols = ", ".join(_names(JobSnapshot))
        latest = _current_sql("queue = ? AND id = ?")  # ranked after the filter: one job's rows
        got = self._rows(f"SELECT {cols} FROM ({latest})", [queue, job_id])
        return JobSnapshot(*got.rows[0]) if got.rows else None

    def search(
        self,
        *,
        queue: str | None = None,
        kind: str | None = None,
        state: str | None = None,
        since_ms: int | None = None,
        until_ms: int | None = None,
        id_prefix: str | None = None,
        limit: int = 50,
        after: str | None = None,
    ) -> SearchPage:
        """Jobs of the ``current`` view, most recently changed first (``at_ms`` descending, then queue and
        id), filtered on what is given (``state`` is the latest ``to_state``; ``since_ms``/``until_ms``
        bound ``at_ms``, until exclusive). ``after`` is the ``next_cursor`` of the previous page: keyset
        paging, so a page never repeats or skips a job that did not change in between."""
        if not 1 <= limit <= _MAX_PAGE:
            raise QueryInvalid(f"limit must be 1..{_MAX_PAGE}, not {limit}")
        inner, inner_params = _conditions((("queue = ?", queue), ("starts_with(id, ?)", id_prefix)))
        conds, params = _conditions(
            (("kind = ?", kind), ("to_state = ?", state), ("at_ms >= ?", since_ms), ("at_ms < ?", until_ms))
        )
        if after is not None:
            at_ms, last_queue, last_id = _decode_cursor(after)
            conds.append("(at_ms < ? OR (at_ms = ? AND (queue > ? OR (queue = ? AND id > ?))))")
            params += [at_ms, at_ms, last_queue, last_queue, last_id]
        where = f"WHERE {' AND '.join(conds)}" if conds else ""
        cols = ", ".join(_SUMMARY)  # without the payload (a page of jobs, not each job's data)
        # queue and id select whole jobs (every version), so they filter before the ranking; the rest
        # (state, time, kind) is a property of the latest version and filters after it
        latest = _current_sql(" AND ".join(inner))
        got = self._rows(
            f"SELECT {cols} FROM ({latest}) {where} ORDER BY at_ms DESC, queue, id LIMIT ?",
            [*inner_params, *params, limit + 1],
        )
        jobs = [JobSnapshot(*row) for row in got.rows[:limit]]
        more = len(got.rows) > limit
        return SearchPage(jobs, _encode_cursor(jobs[-1].at_ms, jobs[-1].queue, jobs[-1].id) if more else None)

    # --- reports -----------------------------------------------------------------------------------

    def wait_time(self, by: str = "kind", per: str = "hour", since_ms: int | None = None) -> Rows:
        """How long jobs waited before their first run: from ``accepted_at`` (the gateway's stamp; the
        first event when there is none) to the first ``running`` event. Columns ``bucket`` (the start of
        the ``per`` bucket the wait began in, UTC), ``by``'s column, ``jobs``, ``p50_ms``, ``p95_ms``,
        ``max_ms``. Jobs that never ran are left out."""
        if by not in _REPORT_BY or per not in _REPORT_PER:
            raise QueryInvalid(f"wait_time: by is one of {_REPORT_BY}, per one of {_REPORT_PER}")
        sql = f"""
            SELECT date_trunc(?, epoch_ms(start_ms)) AS bucket, {by}, count(*) AS jobs,
                   CAST(round(quantile_cont(wait_ms, 0.5)) AS BIGINT) AS p50_ms,
                   CAST(round(quantile_cont(wait_ms, 0.95)) AS BIGINT) AS p95_ms,
                   max(wait_ms) AS max_ms
            FROM (SELECT *, coalesce(accepted_at, first_at) AS start_ms FROM jobs
                  WHERE first_run_at IS NOT NULL)
            WHERE start_ms >= ?
            GROUP BY ALL ORDER BY bucket, {by}"""
        return self._rows(sql, [per, since_ms or 0])

    def errors(self, since_ms: int | None = None) -> Rows:
        """Failed attempts since ``since_ms`` grouped by queue, kind, error class and message digest:
        columns ``queue``, ``kind``, ``error``, ``digest``, ``count`` (events), ``jobs`` (distinct jobs),
        ``sample`` (the latest message), ``first_seen``, ``last_seen`` (ms); most frequent first."""
        sql = """
            SELECT queue, kind, error, digest, count(*) AS count, count(DISTINCT id) AS jobs,
                   arg_max(message, at_ms) AS sample, min(at_ms) AS first_seen, max(at_ms) AS last_seen
            FROM events WHERE error <> '' AND at_ms >= ?
            GROUP BY queue, kind, error, digest
            ORDER BY count DESC, last_seen DESC, queue, kind, error, digest"""
        return self._rows(sql, [since_ms or 0])

    # --- ad-hoc SQL --------------------------------------------------------------------------------

    def query(self, sql: str, *, max_rows: int = 10_000) -> Rows:
        """Run one read-only ``SELECT`` (or ``WITH ... SELECT``) over the views (:data:`VIEWS`); at most
        ``max_rows`` rows come back. Anything else, and any error DuckDB reports for the statement, raises
        :class:`~jqcore.errors.QueryInvalid`."""
        import duckdb

        def work(con: duckdb.DuckDBPyConnection) -> Rows:
            try:
                statements = con.extract_statements(sql)
            except duckdb.Error as exc:
                raise QueryInvalid(f"not valid SQL: {exc}") from exc
            if len(statements) != 1 or statements[0].type != duckdb.StatementType.SELECT:
                kinds = ", ".join(s.type.name for s in statements) or "nothing"
                raise QueryInvalid(f"only a single SELECT statement can be run (got {kinds})")
            try:
                cur = con.execute(sql)
                return Rows([d[0] for d in cur.description or ()], cur.fetchmany(max_rows))
            except (duckdb.IOException, duckdb.InterruptException):
                raise  # perhaps a file deleted by compaction: _run tries again; or past the time limit
            except duckdb.Error as exc:
                raise QueryInvalid(str(exc)) from exc

        try:
            return self._run(work)
        except BackendUnavailable as exc:  # the statement reads files it cannot (a glob with no match)
            raise QueryInvalid(str(exc.__cause__ or exc)) from exc
