"""``jobq status --watch``: the full-screen overview (textual) on the session stack, driven by a pilot."""

from __future__ import annotations

from typing import Any

import pytest
from rich.text import Text
from textual.widgets import DataTable, Static

from jobq.commands.status_tui import StatusApp
from jqcore.envelope import new_envelope
from jqengine import QueueConfig

pytestmark = pytest.mark.asyncio


def _plain(cells: list[Any]) -> list[str]:
    return [c.plain if isinstance(c, Text) else str(c) for c in cells]


async def test_watch_screen_shows_queues_alerts_and_obeys_keys(
    web_sources: Any, engine: Any, prefix: str, eventually: Any
) -> None:
    q = f"{prefix}.tui"
    marked = f"{prefix}[red]markup"  # no producer may name a queue so; Redis may still hold one
    await engine.enqueue_batch([new_envelope(q, "noop", {"n": i}) for i in range(3)])
    await engine.admin.configure_queue(marked, QueueConfig())
    topic = web_sources.relay.topics[0]

    app = StatusApp(web_sources, every_s=0.5)
    app.refreshed.enable()
    async with app.run_test(size=(120, 40)) as pilot:
        table = app.query_one("#queues", DataTable)
        await app.refreshed.wait_for()  # the queues were there before the first refresh
        await pilot.pause()
        assert {q, marked} <= {k.value for k in table.rows}
        assert _plain(table.get_row(q))[:6] == [q, "3", "0", "0", "0", "0"]

        # the alerts panel names the test topic: no relay holds its lock
        panel = app.query_one("#alerts", Static)
        assert isinstance(panel.content, Text)
        assert f"no relay for {topic}" in panel.content.plain
        assert panel.has_class("critical")
        lag = app.query_one("#lag", DataTable)
        assert {_plain(lag.get_row(f"{topic}/{p}"))[6] for p in (0, 1)} == {"nobody"}

        # data is never parsed as markup: the name shows literally, unstyled
        cell = table.get_row(marked)[0]
        assert isinstance(cell, Text)
        assert (cell.plain, cell.spans) == (marked, [])
        await pilot.press("p")  # paused: the rows stay put while the screen is read
        assert app.paused
        assert "PAUSED" in app.sub_title
        table.move_cursor(row=table.get_row_index(marked))
        await pilot.pause()
        assert marked in app.export_screenshot()

        # paused, no refresh lands by itself; r reads at once
        await engine.enqueue_batch([new_envelope(q, "noop", {"n": i}) for i in range(2)])
        mark = app.refreshed.mark()
        await pilot.press("r")
        await app.refreshed.wait_for(after=mark)
        await pilot.pause()
        assert _plain(table.get_row(q))[1] == "5"
        await pilot.press("p")
        assert not app.paused

        await pilot.press("q")
        # Textual's own exit: nothing of ours to signal it
        await eventually(lambda: app.is_running, lambda running: not running, timeout_s=10)
    assert app.return_code == 0
