"""One module per page (its routes, its reads and its actions); :data:`PAGES` is the order of the menu."""

from __future__ import annotations

from jqweb.pages import (
    audit,
    dead,
    graphs,
    job,
    jobs,
    login,
    overview,
    queues,
    schedules,
    topics,
    workers,
)

__all__ = ["PAGES"]

PAGES = (login, overview, topics, queues, jobs, job, dead, schedules, graphs, workers, audit)
