"""A queue's kept settings restored before the relay writes its first job.

Redis holds a queue's configuration; Consul keeps a copy (:mod:`jqruntime.stores.config`). A queue Redis has
no configuration of is new, or was lost with Redis's data (a wipe, a lost volume): without this, the relay's
write would create it with the defaults — an exclusive queue simple, a fair queue unfair — until an operator
runs ``jobq rebuild``. The engine asks which queues of a write Redis knows in the round trip it makes anyway
(:attr:`jqengine.Engine.before_new_queues`) and hands the others here first: their kept configuration and
their kinds' options for them come back from Consul — and, the first time after Redis lost its data, the kill
switches in force, before any of them (a restored queue is announced with them: a poison kind switched off
stays off). Consul unreachable holds the batch (retried like a Redis outage); a queue with nothing kept is
created with the defaults, as before.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from jqcore.errors import BackendUnavailable
from jqcore.log import get_logger
from jqengine import Engine
from jqruntime.stores.config import ConfigStore, restore, restore_switches

__all__ = ["restorer", "switches_at_start"]

log = get_logger("jqrelay.kept")


def restorer(store: ConfigStore, engine: Engine) -> Callable[[list[str]], Awaitable[list[str]]]:
    """The engine's ``before_new_queues``: restore what Consul keeps for these queues; the queues given a
    configuration or a kind's options."""

    async def restore_kept(queues: list[str]) -> list[str]:
        report = await restore(store, engine, only=queues)
        if report.switches:
            log.warning("kill switches Redis lost put back in force", switches=report.switches)
        if report.unreadable:
            log.warning("kept settings unreadable, not restored", keys=report.unreadable)
        touched = sorted(set(report.queues) | {k.rpartition("@")[2] for k in report.kinds})
        if touched:
            log.info(
                "kept settings restored before the first write", queues=report.queues, kinds=report.kinds
            )
        return touched

    return restore_kept


async def switches_at_start(store: ConfigStore, engine: Engine) -> None:
    """The kill switches, as the relay starts: those Redis lost before (a Redis started empty) back in
    force, those set before switches were kept (an upgrade) kept from now on — not only at the first write
    to a queue Redis does not know. Consul or Redis not answering: left to that first write."""
    try:
        put_back, unreadable = await restore_switches(store, engine)
    except BackendUnavailable as exc:
        log.warning("kill switches not checked against Consul's copy at start", error=exc.message)
        return
    if put_back:
        log.warning("kill switches Redis lost put back in force", switches=put_back)
    if unreadable:
        log.warning("kept settings unreadable, not restored", keys=unreadable)
