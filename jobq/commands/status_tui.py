"""``jobq status --watch``: the dashboard's Overview as a full-screen terminal view (textual).

The same reads as ``jqweb/pages/overview.py``: :func:`jqweb.overview.collect` (Kafka lag, relay locks,
Redis, cron), :func:`jqweb.overview.alerts` with the dead letters added in the last hour
(:func:`jqweb.series.growth`), and the rates of the last hour (``h``: 24 h) from :func:`jqweb.series.read`
as sparklines. A refresh runs as a worker on the app's loop (the Kafka and Consul parts in threads), so
the screen stays responsive; a refresh still under way when the next is due is not started twice.

Its cells and tables are :mod:`jobq.commands.status_widgets`.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any, ClassVar

from rich.text import Text
from textual.app import App, ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical
from textual.widgets import DataTable, Footer, Header, Label, Sparkline, Static
from textual.worker import Worker

from jobq.commands.status_widgets import (
    CANARY_COLUMNS,
    LAG_COLUMNS,
    QUEUE_COLUMNS,
    RATES,
    Cell,
    alerts_text,
    canary_cells,
    fill,
    lag_rows,
    merge,
    points,
    queue_cells,
    rate_label,
    services_text,
)
from jqcore.clock import now_ms
from jqcore.testsignal import TestSignal
from jqengine import RedisClient, connect
from jqweb import series
from jqweb.alerting import FAILURE_WINDOW_S
from jqweb.overview import Alert, Sources, alerts, collect

__all__ = ["StatusApp"]

HOUR_MS = 3600 * 1000
PARTS = ("kafka", "locks", "redis", "cron")
"""What the dashboard's live panel reads (history is left out: a DuckDB scan per refresh is not needed)."""


class StatusApp(App[None]):
    """The pipeline at a glance, refreshed every ``every_s`` seconds."""

    TITLE = "jobq status"
    CSS = """
    Screen { layout: vertical; }
    .panel { border: round $primary-darken-2; border-title-color: $text-muted; height: auto; }
    #alerts { max-height: 8; overflow-y: auto; padding: 0 1; }
    #alerts.critical { border: round $error; }
    #alerts.warning { border: round $warning; }
    #rates { height: 3; }
    .rate { width: 1fr; height: 3; padding: 0 1; }
    .rate Label { width: 1fr; height: 1; text-wrap: nowrap; text-overflow: ellipsis; }
    .rate Sparkline { height: 2; }
    #live { height: auto; max-height: 10; }
    #lag, #canaries { width: 1fr; max-height: 10; }
    #services { height: 1; padding: 0 1; text-wrap: nowrap; text-overflow: ellipsis; }
    #queues { height: 1fr; min-height: 6; }
    Screen.-short #alerts { max-height: 4; }
    Screen.-short #rates, Screen.-short .rate { height: 2; }
    Screen.-short .rate Sparkline { height: 1; }
    Screen.-short #live, Screen.-short #lag, Screen.-short #canaries { max-height: 7; }
    """
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("q", "quit", "Quit"),
        Binding("r", "refresh_now", "Refresh now"),
        Binding("p", "toggle_pause", "Pause/resume"),
        Binding("h", "toggle_hours", "1 h / 24 h"),
    ]

    def __init__(
        self, sources: Sources | None = None, every_s: float = 2.0, client: RedisClient | None = None
    ) -> None:
        super().__init__()
        self.VERTICAL_BREAKPOINTS = [(0, "-short"), (36, "-tall")]
        """Below 36 rows the panels above the queues shrink so the Queues table keeps its rows (80x24)."""
        self.sources = sources or Sources()
        self.every_s = max(0.2, every_s)
        self._client = client
        self._own_client = client is None
        self._worker: Worker[None] | None = None
        self._again = False
        self.paused = False
        self.hours = 1
        self.refreshes = 0
        """Refreshes that landed."""
        self.refreshed: TestSignal[int] = TestSignal("status refreshed")
        """A refresh landed on screen: how many have (:mod:`jqcore.testsignal`)."""
        self.snapshot: dict[str, Any] = {}
        self.alerts: list[Alert] = []
        self.error: str | None = None
        self.last_at: float | None = None

    # ---- layout -------------------------------------------------------------------------------------
    def compose(self) -> ComposeResult:
        yield Header(show_clock=True)
        alerts_panel = Static(Text("Reading Kafka, Consul and Redis…", style="dim"), id="alerts")
        alerts_panel.add_class("panel")
        alerts_panel.border_title = "Alerts"
        yield alerts_panel
        with Horizontal(id="rates"):
            for key, title in RATES:
                with Vertical(classes="rate"):
                    yield Label(Text(title, style="bold"), id=f"rate-{key}-label")
                    yield Sparkline([], id=f"rate-{key}")
        with Horizontal(id="live"):
            yield self._table("lag", "Kafka → relay", LAG_COLUMNS)
            yield self._table("canaries", "Canaries", CANARY_COLUMNS)
        yield Static(Text(""), id="services")
        yield self._table("queues", "Queues", QUEUE_COLUMNS)
        yield Footer()

    @staticmethod
    def _table(id: str, title: str, columns: Sequence[str]) -> DataTable[Cell]:
        table: DataTable[Cell] = DataTable(id=id, classes="panel", zebra_stripes=True, cursor_type="row")
        table.border_title = title
        for col in columns:
            table.add_column(col, key=col)
        return table

    def on_mount(self) -> None:
        if self._client is None:
            self._client = connect(self.sources.redis)
        self._show_state()
        self.set_interval(self.every_s, self._tick)
        self.query_one("#queues", DataTable).focus()
        self.action_refresh_now()

    async def on_unmount(self) -> None:
        if self._own_client and self._client is not None:
            await self._client.aclose()

    # ---- keys ---------------------------------------------------------------------------------------
    def action_refresh_now(self) -> None:
        """Start a refresh; one under way (Kafka or Consul slow: never two at once) reads again when done."""
        if self._worker is not None and self._worker.is_running:
            self._again = True
            return
        self._worker = self.run_worker(self._refresh(), group="refresh", exit_on_error=False)

    def action_toggle_pause(self) -> None:
        self.paused = not self.paused
        self._show_state()

    def action_toggle_hours(self) -> None:
        self.hours = 24 if self.hours == 1 else 1
        self._show_state()
        self.action_refresh_now()

    def _tick(self) -> None:
        if not self.paused:
            self.action_refresh_now()

    def _show_state(self) -> None:
        every = f"every {self.every_s:g} s" + (" (PAUSED: p resumes)" if self.paused else "")
        read = time.strftime("%H:%M:%S", time.localtime(self.last_at)) if self.last_at else "…"
        self.sub_title = f"{every} · rates over {self.hours} h · read at {read}"

    # ---- data ---------------------------------------------------------------------------------------
    async def _refresh(self) -> None:
        self._again = True
        while self._again:
            self._again = False
            await self._read()

    async def _read(self) -> None:
        assert self._client is not None
        try:
            snap = await collect(self.sources, self._client, parts=PARTS)
            redis: Any = snap.get("redis")
            ok = isinstance(redis, dict) and "queues" in redis
            queues = [q["queue"] for q in redis["queues"]] if ok else []
            rates = await series.read(self._client, queues, now_ms() - self.hours * HOUR_MS)
            grown = await series.growth(self._client, queues, "errored", now_ms() - HOUR_MS) if queues else {}
            since = now_ms() - FAILURE_WINDOW_S * 1000
            ended = await series.outcomes(self._client, queues, since) if queues else {}
        except Exception as e:  # Redis away: say so on screen, keep the last numbers, try again next tick
            self.error = f"{type(e).__name__}: {e}"
            self._show_alerts()
            return
        self.error = None
        self.snapshot = snap
        self.alerts = alerts(snap, grown, ended)
        self.last_at = time.time()
        self._show(snap, rates)
        self.refreshes += 1
        self.refreshed.signal(self.refreshes)

    def _show(self, snap: dict[str, Any], rates: series.Rates) -> None:
        self._show_state()
        self._show_alerts()
        self._show_rates(rates)
        redis = snap.get("redis")
        self.query_one("#services", Static).update(services_text(redis))
        queues = redis.get("queues", []) if isinstance(redis, dict) else []
        merge(self.query_one("#queues", DataTable), {str(q["queue"]): queue_cells(q) for q in queues})
        canary = redis.get("canary", {}) if isinstance(redis, dict) else {}
        fill(self.query_one("#canaries", DataTable), {str(p): canary_cells(p, c) for p, c in canary.items()})
        fill(self.query_one("#lag", DataTable), lag_rows(snap.get("kafka"), snap.get("locks")))

    def _show_alerts(self) -> None:
        panel = self.query_one("#alerts", Static)
        panel.update(alerts_text(self.alerts, self.error))
        critical = self.error is not None or any(a.level == "critical" for a in self.alerts)
        panel.set_class(critical, "critical")
        panel.set_class(not critical and bool(self.alerts), "warning")
        panel.border_title = f"Alerts ({len(self.alerts)})" if self.alerts else "Alerts"

    def _show_rates(self, rates: series.Rates) -> None:
        for key, title in RATES:
            values: list[float | None] = list(getattr(rates, key))
            self.query_one(f"#rate-{key}", Sparkline).data = points(values)
            self.query_one(f"#rate-{key}-label", Label).update(rate_label(title, values))
