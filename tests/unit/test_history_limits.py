"""The history's bounds as pure logic (security review M8/L6): each DuckDB connection's memory, threads and
spill folder, the time limit of a query, the pool history queries run on (slots, half per token, a slot
held until the query's thread is done) and the memory of archive misses."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from jqcore.errors import QueryTimeout
from jqcore.settings.pipeline import HistorySettings
from jqruntime.historypool import HistoryPool, MissCache
from jqruntime.http import HttpError
from jqruntime.stores.history import SPILL_DIR, HistoryStore, QueryLimits
from kafkagate.limits import busy

SETTINGS_SQL = (
    "SELECT current_setting('memory_limit'), current_setting('threads'), current_setting('temp_directory'),"
    " current_setting('max_temp_directory_size')"
)
SLOW_SQL = "SELECT count(*) FROM range(100000000) a, range(1000) b WHERE (a.range * b.range) % 7 = 3"


def test_a_connection_has_small_limits_by_default(tmp_path: Path) -> None:
    """DuckDB's own defaults are 80 % of the machine's memory and every core, per connection."""
    ((memory, threads, spill, spill_max),) = HistoryStore(tmp_path).query(SETTINGS_SQL).rows
    assert (memory, threads) == ("256.0 MiB", 1)
    assert Path(spill).name == SPILL_DIR
    assert spill_max == "1.0 GiB"


def test_the_settings_set_the_limits(tmp_path: Path) -> None:
    settings = HistorySettings(
        query_memory_mb=64,
        query_threads=2,
        query_temp_dir=str(tmp_path / "spill"),
        query_temp_max_mb=10,
        query_timeout_s=3,
    )
    limits = QueryLimits.of(settings)
    assert limits.timeout_s == 3
    assert QueryLimits.of(settings, timeout=False).timeout_s is None  # the CLI's
    ((memory, threads, spill, spill_max),) = HistoryStore(tmp_path, limits).query(SETTINGS_SQL).rows
    assert (memory, threads, spill, spill_max) == ("64.0 MiB", 2, str(tmp_path / "spill"), "10.0 MiB")


def test_a_query_past_its_time_limit_is_interrupted(tmp_path: Path) -> None:
    store = HistoryStore(tmp_path, QueryLimits(timeout_s=0.3))
    started = time.monotonic()
    with pytest.raises(QueryTimeout) as caught:
        store.query(SLOW_SQL)
    assert time.monotonic() - started < 5
    assert (caught.value.code, caught.value.http_status) == ("history_timeout", 504)
    assert "JOBQ_HISTORY_QUERY_TIMEOUT_S" in caught.value.message
    assert store.query("SELECT 1").rows == [(1,)], "the next query runs on a fresh connection"


class Blocked:
    """Callables for the pool that run until released (each counts as started when its thread runs it)."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.started = 0
        self.lock = threading.Lock()

    def __call__(self) -> str:
        with self.lock:
            self.started += 1
        self.release.wait(10)
        return "done"


async def test_the_pool_refuses_past_its_slots_and_past_half_of_them_for_one_token() -> None:
    pool = HistoryPool(4, busy, setting="JOBQ_HISTORY_QUERY_SLOTS")
    work = Blocked()
    try:
        assert pool.per_token == 2
        alice = [asyncio.create_task(pool.run("alice", work)) for _ in range(2)]
        await asyncio.sleep(0)
        with pytest.raises(HttpError) as share:
            await pool.run("alice", work)
        assert (share.value.status, share.value.code) == (429, "gateway_busy")
        assert share.value.headers == {"Retry-After": "1"}
        assert "for one token" in share.value.message
        bob = [asyncio.create_task(pool.run("bob", work)) for _ in range(2)]
        await asyncio.sleep(0)
        with pytest.raises(HttpError) as full:
            await pool.run("carol", work)
        assert (full.value.status, full.value.code) == (429, "gateway_busy")
        assert "4 history queries at once (JOBQ_HISTORY_QUERY_SLOTS)" in full.value.message
        work.release.set()
        assert await asyncio.gather(*alice, *bob) == ["done"] * 4
        assert pool.used == 0
        assert await pool.run("carol", lambda: 42) == 42
    finally:
        work.release.set()
        pool.close()


async def test_one_slot_is_one_token_s_and_is_held_until_its_thread_is_done(
    eventually: Callable[..., Any],
) -> None:
    """A client hanging up frees nothing: the query runs on, so its slot stays taken until it ends."""
    pool = HistoryPool(1, busy, setting="JOBQ_HISTORY_QUERY_SLOTS")
    work = Blocked()
    try:
        assert pool.per_token == 1
        first = asyncio.create_task(pool.run("alice", work))
        await eventually(lambda: work.started, bool, 5)
        assert work.started == 1
        first.cancel()
        with pytest.raises(asyncio.CancelledError):
            await first
        assert pool.used == 1
        with pytest.raises(HttpError):
            await pool.run("bob", work)
        work.release.set()
        await eventually(lambda: pool.used, lambda used: used == 0, 5)
        assert pool.used == 0
        assert await pool.run("bob", lambda: "ok") == "ok"
    finally:
        work.release.set()
        pool.close()


def test_archive_misses_are_remembered_briefly_and_boundedly() -> None:
    misses = MissCache(5.0, max_entries=3)
    misses.note("q", "a", now=100.0)
    assert misses.missed("q", "a", now=104.9)
    assert not misses.missed("q", "a", now=105.0), "forgotten after the TTL"
    assert not misses.missed("other", "a", now=101.0), "per queue and id"
    for job in ("a", "b", "c", "d"):
        misses.note("q", job, now=200.0)
    assert len(misses) == 3
    assert not misses.missed("q", "a", now=201.0), "the oldest goes first"
    assert misses.missed("q", "d", now=201.0)
    off = MissCache(0)
    off.note("q", "a")
    assert not off.missed("q", "a")
