"""What a pool asks Redis about its queues outside its claims: a filter it may use, whether all is done."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from jqengine import Engine, FilterInvalid

__all__ = ["check_filter", "queues_empty"]


async def check_filter(engine: Engine, queues: Sequence[str], filter: Mapping[str, str] | None) -> None:
    """Refuse to start with a filter on a key a queue does not index (it would claim nothing, ever)."""
    for queue in queues if filter else ():
        indexed = (await engine.reads.queue_config(queue)).filter_keys
        missing = sorted(set(filter or {}) - set(indexed))
        if missing:
            raise FilterInvalid(
                f"queue {queue!r} does not index {missing} (its filter_keys: {list(indexed)})"
            )


async def queues_empty(engine: Engine, queues: Sequence[str]) -> bool:
    """Nothing pending, delayed, blocked or running in any of ``queues`` (a burst pool's end)."""
    for queue in queues:
        d = await engine.reads.depth(queue)
        if d.pending or d.delayed or d.running or d.blocked:
            return False
    return True
