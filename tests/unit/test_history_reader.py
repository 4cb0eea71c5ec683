"""The history reader over hand-made Parquet files in the pipeline's layout (written with DuckDB, no
Spark): deduplication of replayed batches, the latest version per job whatever segments hold it, the
timeline's durations, search paging, the reports, read-only SQL, and an empty store."""

from __future__ import annotations

import shutil
from collections.abc import Iterable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import duckdb
import pytest

from jqcore.errors import QueryInvalid
from jqruntime.stores.history import (
    CURRENT_COLUMNS,
    EVENT_COLUMNS,
    PAYLOAD_COLUMNS,
    HistoryStore,
    JobSnapshot,
)

T0 = int(datetime(2026, 3, 1, 23, 0, tzinfo=UTC).timestamp() * 1000)  # day 1 ends an hour later
HOUR = 3_600_000


def ev(queue: str, job: str, v: int, at: int, to: str, **kw: Any) -> dict[str, Any]:
    row: dict[str, Any] = {c: ("" if t is str else 0) for c, t in EVENT_COLUMNS}
    row.update(id=job, queue=queue, kind=kw.pop("kind", "mail"), v=v, at_ms=T0 + at, to_state=to, **kw)
    return row


# Three jobs in q1 (one retried, one failed for good, one never run) and a namesake of "a" in q2.
A = [
    ev("q1", "a", 1, 0, "pending", accepted_at=T0 - 300),
    ev("q1", "a", 2, 200, "running", from_state="pending", attempt=1, worker="w1"),
    ev(
        "q1",
        "a",
        3,
        500,
        "delayed",
        from_state="running",
        attempt=1,
        error="ValueError",
        digest="d1",
        message="boom",
        run_at=T0 + 1500,
    ),
    ev("q1", "a", 4, 2 * HOUR, "running", from_state="pending", attempt=2, worker="w2"),
    ev("q1", "a", 5, 2 * HOUR + 600, "completed", from_state="running", attempt=2, worker="w2"),
]
B = [
    ev("q1", "b", 1, 100, "pending", accepted_at=T0 + 50),
    ev("q1", "b", 2, 600, "running", from_state="pending", attempt=1, worker="w1"),
    ev(
        "q1",
        "b",
        3,
        900,
        "errored",
        from_state="running",
        attempt=1,
        error="KeyError",
        digest="d2",
        message="no key",
    ),
]
C = [ev("q1", "c", 1, 3 * HOUR, "pending", kind="report")]
A2 = [ev("q2", "a", 1, 4 * HOUR, "pending", kind="other")]
ALL = A + B + C + A2


def write_parquet(path: Path, rows: Iterable[dict[str, Any]], columns: tuple[tuple[str, type], ...]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    con = duckdb.connect()
    con.execute(
        "CREATE TABLE t ("
        + ", ".join(f'"{c}" {"VARCHAR" if t is str else "BIGINT"}' for c, t in columns)
        + ")"
    )
    con.executemany(
        f"INSERT INTO t VALUES ({', '.join('?' * len(columns))})", [[r[c] for c, _ in columns] for r in rows]
    )
    con.execute(f"COPY t TO '{path}' (FORMAT parquet)")
    con.close()


def day_of(row: dict[str, Any]) -> str:
    return datetime.fromtimestamp(row["at_ms"] / 1000, UTC).date().isoformat()


def write_batch(root: Path, tag: str, rows: list[dict[str, Any]]) -> None:
    """What one micro-batch writes: its events per day, and a b-segment with each job's latest row."""
    for day in {day_of(r) for r in rows}:
        part = root / "events" / f"day={day}" / f"batch={tag}" / "part-00000-x.c000.snappy.parquet"
        write_parquet(part, [r for r in rows if day_of(r) == day], EVENT_COLUMNS)
    write_segment(root, f"b{tag}", rows)


def write_segment(root: Path, seg: str, rows: list[dict[str, Any]]) -> None:
    latest: dict[tuple[str, str], dict[str, Any]] = {}
    for r in sorted(rows, key=lambda r: r["v"]):
        key = (r["queue"], r["id"])
        prev = latest.get(key, {**r, "first_at": r["at_ms"]})
        first_at, accepted_at = min(prev["first_at"], r["at_ms"]), max(prev["accepted_at"], r["accepted_at"])
        latest[key] = {**r, "first_at": first_at, "accepted_at": accepted_at}
    write_parquet(root / "current" / f"seg={seg}" / "part-00000.parquet", latest.values(), CURRENT_COLUMNS)


@pytest.fixture
def root(tmp_path: Path) -> Path:
    root = tmp_path / "history"
    write_batch(root, "q1aa-000000000", A[:2] + B[:1])
    write_batch(root, "q1aa-000000001", A[1:] + B[1:] + [B[1]])  # a duplicate within the batch too
    write_batch(root, "q1aa-000000002", C + A2)
    # a second pipeline (new checkpoint) replaying the start of the topic: copies of the same events
    write_batch(root, "q2bb-000000000", A[:3] + B)
    # a write in progress: Spark's staging folder is never read
    staged = root / "events" / ".spark-staging-1" / "day=2026-03-01" / "batch=z" / "part-0.parquet"
    write_parquet(staged, [ev("q1", "ghost", 1, 0, "pending")], EVENT_COLUMNS)
    return root


def snapshot(store: HistoryStore) -> dict[str, Any]:
    """Every answer the store gives, for comparing two layouts of the same rows."""
    return {
        "events": store.query("SELECT * FROM events ORDER BY queue, id, v").rows,
        "current": store.search(limit=100).jobs,
        "jobs": store.query("SELECT * FROM jobs ORDER BY queue, id").rows,
        "timeline": store.timeline("a"),
        "wait": store.wait_time(),
        "errors": store.errors(),
    }


def test_events_are_deduplicated_and_staging_files_ignored(root: Path) -> None:
    store = HistoryStore(root)
    got = store.query("SELECT queue, id, v, to_state, day FROM events ORDER BY queue, id, v")
    assert got.columns == ["queue", "id", "v", "to_state", "day"]
    assert [r[:4] for r in got.rows] == [
        (e["queue"], e["id"], e["v"], e["to_state"])
        for e in sorted(ALL, key=lambda e: (e["queue"], e["id"], e["v"]))
    ]
    assert {str(r[4]) for r in got.rows} == {"2026-03-01", "2026-03-02"}
    assert store.query("SELECT count(*) FROM events_files").rows[0][0] > len(ALL), "the files hold copies"


def test_timeline_orders_by_queue_and_version_with_time_in_each_state(root: Path) -> None:
    store = HistoryStore(root)
    entries = store.timeline("a")
    assert [(e.queue, e.v, e.to_state) for e in entries] == [
        ("q1", 1, "pending"),
        ("q1", 2, "running"),
        ("q1", 3, "delayed"),
        ("q1", 4, "running"),
        ("q1", 5, "completed"),
        ("q2", 1, "pending"),
    ]
    assert [e.duration_ms for e in entries] == [200, 300, 2 * HOUR - 500, 600, None, None]
    assert entries[2].error == "ValueError"
    assert entries[2].run_at == T0 + 1500
    assert [e.queue for e in store.timeline("a", queue="q2")] == ["q2"]
    assert store.timeline("nope") == []


def test_current_is_the_highest_version_whatever_segment_holds_it(root: Path) -> None:
    store = HistoryStore(root)
    a = store.current("q1", "a")
    assert a is not None
    assert (a.v, a.to_state, a.worker, a.at_ms) == (5, "completed", "w2", T0 + 2 * HOUR + 600)
    assert (a.first_at, a.accepted_at) == (T0, T0 - 300), "the first event's at, the enqueue's accepted_at"
    assert a.as_dict()["to_state"] == "completed"
    b = store.current("q1", "b")
    assert b is not None
    assert (b.v, b.to_state, b.error) == (3, "errored", "KeyError")
    assert store.current("q2", "b") is None


def test_compaction_segments_give_the_same_answers(root: Path) -> None:
    store = HistoryStore(root)
    before = snapshot(store)
    # a compaction: every segment's rows in one c-segment, the segments it read deleted ...
    write_segment(root, "cq2bb-000000000", ALL)
    for seg in (root / "current").glob("seg=b*"):
        shutil.rmtree(seg)
    assert snapshot(store) == before
    # ... and a replayed batch writing its b-segment again afterwards (older versions: harmless)
    write_batch(root, "q1aa-000000000", A[:2] + B[:1])
    assert snapshot(store) == before


def test_search_filters_and_pages_newest_first(root: Path) -> None:
    store = HistoryStore(root)
    everything = store.search()
    assert [(j.queue, j.id) for j in everything.jobs] == [("q2", "a"), ("q1", "c"), ("q1", "a"), ("q1", "b")]
    assert everything.next_cursor is None
    pages: list[JobSnapshot] = []
    cursor: str | None = None
    while True:
        page = store.search(limit=1, after=cursor)
        pages += page.jobs
        cursor = page.next_cursor
        if cursor is None:
            break
    assert pages == everything.jobs

    def ids(**kw: Any) -> list[str]:
        return [f"{j.queue}/{j.id}" for j in store.search(**kw).jobs]

    assert ids(queue="q1", state="errored") == ["q1/b"]
    assert ids(kind="report") == ["q1/c"]
    assert ids(id_prefix="a") == ["q2/a", "q1/a"]
    assert ids(since_ms=T0 + 2 * HOUR, until_ms=T0 + 4 * HOUR) == ["q1/c", "q1/a"]
    with pytest.raises(QueryInvalid):
        store.search(after="not-a-cursor")
    with pytest.raises(QueryInvalid):
        store.search(limit=0)


def test_jobs_view_rolls_up_attempts_errors_wait_and_run_time(root: Path) -> None:
    got = HistoryStore(root).query(
        "SELECT id, state, attempts, errors, wait_ms, run_ms FROM jobs WHERE queue = 'q1' ORDER BY id"
    )
    assert got.rows == [
        ("a", "completed", 2, 1, 200 + 300, 300 + 600),
        ("b", "errored", 1, 1, 550, 300),
        ("c", "pending", 0, 0, None, None),
    ]


def test_wait_time_report(root: Path) -> None:
    store = HistoryStore(root)
    got = store.wait_time(by="kind", per="day")
    assert got.columns == ["bucket", "kind", "jobs", "p50_ms", "p95_ms", "max_ms"]
    assert [r[1:] for r in got.rows] == [("mail", 2, 525, 548, 550)]  # waits 500 and 550
    assert str(got.rows[0][0]) == "2026-03-01 00:00:00"
    by_queue = store.wait_time(by="queue", per="hour")
    assert [(str(r[0]), r[1], r[2]) for r in by_queue.rows] == [
        ("2026-03-01 22:00:00", "q1", 1),
        ("2026-03-01 23:00:00", "q1", 1),
    ]
    assert store.wait_time(since_ms=T0 + 1).rows[0][2] == 1
    with pytest.raises(QueryInvalid):
        store.wait_time(by="kind; drop table x")
    with pytest.raises(QueryInvalid):
        store.wait_time(per="week")


def test_errors_report_counts_each_failure_once(root: Path) -> None:
    got = HistoryStore(root).errors()
    assert got.columns == [
        "queue",
        "kind",
        "error",
        "digest",
        "count",
        "jobs",
        "sample",
        "first_seen",
        "last_seen",
    ]
    assert sorted(got.rows) == [
        ("q1", "mail", "KeyError", "d2", 1, 1, "no key", T0 + 900, T0 + 900),
        ("q1", "mail", "ValueError", "d1", 1, 1, "boom", T0 + 500, T0 + 500),
    ]
    assert HistoryStore(root).errors(since_ms=T0 + 600).rows[0][2] == "KeyError"


@pytest.mark.parametrize(
    "sql",
    [
        "DELETE FROM events",
        "SELECT 1; SELECT 2",
        "COPY events TO 'out.parquet'",
        "CREATE TABLE t AS SELECT 1",
        "PRAGMA version",
        "SET threads = 1",
        "ATTACH 'other.db'",
        "SELEC 1",
        "",
        "SELECT nope FROM events",
        "SELECT * FROM read_text('/etc/hostname')",
        "SELECT * FROM read_parquet('/tmp/*.parquet')",
    ],
)
def test_query_runs_a_single_select_only(root: Path, sql: str) -> None:
    with pytest.raises(QueryInvalid) as info:
        HistoryStore(root).query(sql)
    assert info.value.http_status == 400


def test_query_answers_with_and_without_cte(root: Path) -> None:
    store = HistoryStore(root)
    got = store.query("WITH r AS (SELECT * FROM current) SELECT count(*) AS n FROM r")
    assert (got.columns, got.rows) == (["n"], [(4,)])
    assert len(store.query("SELECT * FROM job_states", max_rows=3).rows) == 3


def test_empty_store_answers_empty(tmp_path: Path) -> None:
    store = HistoryStore(tmp_path / "nothing-yet")
    assert store.timeline("a") == []
    assert store.current("q", "a") is None
    assert store.search().jobs == []
    assert store.wait_time().rows == []
    assert store.errors().rows == []
    for view in ("events", "current", "job_states", "jobs"):
        assert store.query(f"SELECT count(*) FROM {view}").rows == [(0,)]
    cols = store.query("SELECT * FROM current").columns
    assert cols == [c for c, _ in (*CURRENT_COLUMNS, *PAYLOAD_COLUMNS)]
    # events but no current segment yet (and the other way round) are fine too
    write_parquet(tmp_path / "x" / "events" / "day=2026-03-01" / "batch=b" / "p.parquet", A, EVENT_COLUMNS)
    half = HistoryStore(tmp_path / "x")
    assert len(half.timeline("a")) == 5
    assert half.current("q1", "a") is None


# ---- the CLI over the same tables (jobq history ...) --------------------------------------------------


def cli(root: Path, *args: str) -> Any:
    from typer.testing import CliRunner

    from jobq.cli import app

    return CliRunner().invoke(app, ["history", *args], env={"JOBQ_HISTORY_PATH": str(root)})


def test_cli_tells_a_jobs_story_hop_by_hop(root: Path) -> None:
    result = cli(root, "a", "--queue", "q1")  # `jobq history JOB_ID` is `jobq history show JOB_ID`
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[0] == "job a in q1 (mail)"
    assert "+0 ms  accepted by the gateway" in lines[1]
    assert "+300 ms  written to Redis from a direct write → pending  [200 ms in pending]" in lines[2]
    assert "claimed by w1 (attempt 1)" in lines[3]
    assert "failed with ValueError: boom → delayed" in lines[4]
    assert "claimed by w2 (attempt 2)" in lines[5]
    assert lines[6].endswith("running → completed")
    both = cli(root, "show", "a")  # the id in two queues: both timelines
    assert both.output.count("job a in") == 2
    missing = cli(root, "nope")
    assert missing.exit_code == 1
    assert "no events of job 'nope'" in missing.output


def test_cli_reports_tables_and_charts(root: Path, tmp_path: Path) -> None:
    chart = tmp_path / "kinds.png"
    result = cli(
        root,
        "query",
        "SELECT kind, count(*) AS n FROM jobs GROUP BY kind ORDER BY kind",
        "--plot",
        str(chart),
    )
    assert result.exit_code == 0, result.output
    assert result.output.splitlines()[:4] == ["kind\tn", "mail\t2", "other\t1", "report\t1"]
    assert chart.read_bytes().startswith(b"\x89PNG")
    errors = cli(root, "errors", "--since", "3650d", "--plot", str(tmp_path / "errors.png"))
    assert errors.exit_code == 0, errors.output
    assert "ValueError" in errors.output
    assert "KeyError" in errors.output
    wait = cli(root, "wait-time", "--by", "queue", "--per", "day", "--since", "3650d")
    assert wait.exit_code == 0, wait.output
    refused = cli(root, "query", "DELETE FROM events")
    assert isinstance(refused.exception, QueryInvalid)
    bad = cli(root, "errors", "--since", "yesterday")
    assert bad.exit_code == 2
    assert "30s, 5m, 24h, 7d" in bad.output


def test_since_spans(root: Path) -> None:
    from jobq.commands.history import since_ms

    assert since_ms("2h", now=10 * HOUR) == 8 * HOUR
    assert since_ms("90s", now=100_000) == 10_000
    assert since_ms("7d", now=8 * 24 * HOUR) == 24 * HOUR
    assert since_ms("1h30m", now=2 * HOUR) == HOUR // 2


# ---- the payload kept with a job's end (the archive) ------------------------------------------------------


def test_the_payload_of_a_jobs_end_is_read_beside_files_without_one(root: Path) -> None:
    """Segments written since the history keeps payloads carry the payload columns; the older ones in the
    same root have none (NULL). ``current`` gives the payload of the job's latest row, a copy with a payload
    winning over an equal copy without; ``search`` leaves the payload out."""
    payload = {
        "args": '{"to":"ann"}',
        "meta": '{"tenant":"t1"}',
        "result": '"sent"',
        "envelope": '{"priority":7,"lease_ms":4000,"expires_at":99}',
        "truncated": "",
    }
    end = ev("q1", "d", 2, 700, "completed", from_state="running", attempt=1)
    cols = (*CURRENT_COLUMNS, *PAYLOAD_COLUMNS)
    bare = {**end, "first_at": end["at_ms"]}
    write_parquet(root / "current" / "seg=bnew-1" / "p.parquet", [{**bare, **payload}], cols)
    write_segment(root, "bnew-2", [end])  # an equal copy without the payload columns at all
    big = ev("q1", "e", 2, 800, "completed", from_state="running", attempt=1)
    cut = {**payload, "args": '{"to":"a', "truncated": "args"}
    write_parquet(root / "current" / "seg=bnew-3" / "p.parquet", [{**big, "first_at": 0, **cut}], cols)

    store = HistoryStore(root)
    got = store.current("q1", "d")
    assert got is not None
    assert got.to_state == "completed"
    kept = got.payload()
    assert kept.kept
    assert (kept.args, kept.meta, kept.result) == ({"to": "ann"}, {"tenant": "t1"}, '"sent"')
    assert (kept.as_dict()["priority"], kept.as_dict()["lease_ms"]) == (7, 4000)
    assert kept.as_dict()["truncated"] == []
    partial = store.current("q1", "e")
    assert partial is not None
    assert (partial.payload().args, partial.payload().truncated) == ('{"to":"a', {"args"})
    old = store.current("q1", "a")  # written without payload columns: NULL, nothing kept
    assert old is not None
    assert (old.payload().kept, old.payload().args) == (False, None)
    found = {j.id: j for j in store.search(queue="q1", limit=100).jobs}
    assert (found["d"].args, found["d"].envelope) == ("", "")
    rows = store.query("SELECT id, args FROM events WHERE args IS NOT NULL").rows
    assert rows == []  # only the current segments were written with a payload here
