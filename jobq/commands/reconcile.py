"""``jobq reconcile``: per topic, gateway → Kafka → relay → Redis → workers, with the balances that must
hold (:mod:`jqrecover.reconcile` collects them); here the option and the tables."""

from __future__ import annotations

from typing import Annotated

import orjson
import typer
from rich.console import Console
from rich.table import Table

from jqcore.routing import RoutingSettings
from jqcore.settings.common import load
from jqcore.settings.kafka import KafkaSettings
from jqcore.settings.servers import RedisSettings
from jqrecover.reconcile import RELAY_STAGES, collect
from jqrelay.settings import RelaySettings

__all__ = ["reconcile"]


def reconcile(
    json: Annotated[bool, typer.Option("--json", help="Print one JSON document.")] = False,
) -> None:
    """Compare, per topic, gateway → Kafka → relay → Redis → workers; exit 1 if a balance does not hold."""
    rows = collect(load(RoutingSettings), load(RelaySettings), load(KafkaSettings), load(RedisSettings))
    console = Console()
    if json:
        console.print_json(orjson.dumps(rows).decode())
    else:
        t = Table(title="jobq reconcile (cumulative counters)")
        for col in ("topic", "produced", "in kafka", "read", *RELAY_STAGES, "checks"):
            t.add_column(col, justify="left" if col in ("topic", "checks") else "right")
        for r in rows:
            checks = " ".join(f"[{'green' if ok else 'red'}]{name}[/]" for name, ok in r["checks"].items())
            t.add_row(
                r["topic"],
                str(r["produced"]),
                str(r["appended"]),
                str(r["read"]),
                *(str(r[s]) for s in RELAY_STAGES),
                checks,
            )
        console.print(t)
        q = Table(title="queues of those topics (lifetime counters)")
        for col in ("queue", "enqueued", "duplicates", "completed", "errored", "canceled", "expired"):
            q.add_column(col, justify="left" if col == "queue" else "right")
        for r in rows:
            for name, st in sorted(r["queues"].items()):
                q.add_row(
                    name,
                    *(
                        str(st.get(k, 0))
                        for k in ("enqueued", "duplicates", "completed", "errored", "canceled", "expired")
                    ),
                )
        console.print(q)
    if not all(ok for r in rows for ok in r["checks"].values()):
        raise typer.Exit(1)
