"""The example's tasks: plain ``@task`` functions, nothing jobq-specific."""

from __future__ import annotations

import asyncio
import time

from jqdjango.compat import TaskContext, task

__all__ = ["add", "context_seen", "fails", "nap", "shout"]


@task
def add(a: int, b: int) -> int:
    return a + b


@task
async def shout(text: str) -> str:
    await asyncio.sleep(0)
    return text.upper()


@task
def fails(message: str) -> None:
    raise ValueError(message)


@task
def nap(label: str, seconds: float = 0.05) -> str:
    """Takes a little while (the priority test reads the order tasks started in)."""
    time.sleep(seconds)
    return label


@task(takes_context=True)
def context_seen(context: TaskContext, note: str) -> dict[str, object]:
    return {"id": context.task_result.id, "attempt": context.attempt, "note": note}
