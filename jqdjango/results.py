"""A jobq job (the gateway's ``GET /v1/queues/{q}/jobs/{id}``) as Django's ``TaskResult``.

States: pending, delayed (also: waiting to retry), waiting (behind an exclusivity value), parked and
scheduled (far future) are READY; running is RUNNING; completed is SUCCESSFUL; errored, canceled and
expired are FAILED. Errors are the attempts' recorded errors (a handler's traceback), with the exception
class read from the traceback's last line.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Any

import orjson

from jqdjango.compat import FAILED, READY, RUNNING, SUCCESSFUL, Task, TaskError, TaskResult

__all__ = ["STATUS", "exception_path", "job_args", "to_result"]

STATUS = {
    "pending": READY,
    "delayed": READY,
    "waiting": READY,
    "parked": READY,
    "scheduled": READY,
    "running": RUNNING,
    "completed": SUCCESSFUL,
    "errored": FAILED,
    "canceled": FAILED,
    "expired": FAILED,
}
"""jobq's job states → Django's (anything else, READY: not finished)."""

_FINISHED = (SUCCESSFUL, FAILED)
_NAME = re.compile(r"([A-Za-z_][\w.]*)(?::|$)")
_JOBQ = {"Retry": "jqcore.errors.Retry", "Cancel": "jqcore.errors.Cancel"}
"""The errors the worker writes itself (``Retry: <reason>``, ``Cancel: <reason>``)."""
_TRACEBACK = "Traceback (most recent call last):"


def exception_path(error: str) -> str:
    """The dotted path of the exception a recorded error names: in a traceback
    (``traceback.format_exception``), the first unindented line after the last frame reads
    ``pkg.mod.Error: message`` (builtins unqualified); otherwise the first line. ``builtins.Exception``
    when it names none."""
    lines = error.strip().splitlines()
    heads = [i for i, line in enumerate(lines) if line.startswith(_TRACEBACK)]
    after = lines[heads[-1] + 1 :] if heads else lines
    line = next((text for text in after if text and not text[0].isspace()), "")
    if line.startswith("timeout after "):
        return "builtins.TimeoutError"
    found = _NAME.match(line)
    if found is None:
        return "builtins.Exception"
    name = found.group(1)
    return name if "." in name else _JOBQ.get(name, f"builtins.{name}")


def _when(ms: Any) -> datetime | None:
    return datetime.fromtimestamp(ms / 1000, UTC) if isinstance(ms, int) else None


def job_args(job: dict[str, Any]) -> tuple[list[Any], dict[str, Any]]:
    """The task's ``args`` and ``kwargs`` as the backend sent them (``{"args": [...], "kwargs": {...}}``)."""
    body = job.get("args")
    body = body if isinstance(body, dict) else {}
    args, kwargs = body.get("args"), body.get("kwargs")
    return (args if isinstance(args, list) else []), (kwargs if isinstance(kwargs, dict) else {})


def _errors(job: dict[str, Any]) -> list[TaskError]:
    texts = [h["error"] for h in job.get("history") or () if isinstance(h, dict) and h.get("error")]
    errors = [TaskError(exception_class_path=exception_path(t), traceback=t) for t in texts]
    state = job.get("state")
    if not errors and state in ("canceled", "expired"):
        path = "jqcore.errors.Cancel" if state == "canceled" else "builtins.TimeoutError"
        errors.append(TaskError(exception_class_path=path, traceback=str(job.get("reason") or state)))
    return errors


def to_result(task: Task[Any, Any], job: dict[str, Any], backend: str) -> TaskResult[Any]:
    """The Django result of one job; ``worker_ids`` has one entry per attempt (jobq keeps the last
    worker's identity only, so each entry is that one's)."""
    status = STATUS.get(str(job.get("state")), READY)
    args, kwargs = job_args(job)
    attempt = job.get("attempt") or 0
    result: TaskResult[Any] = TaskResult(
        task=task,
        id=str(job["id"]),
        status=status,
        enqueued_at=_when(job.get("enqueued_at")),
        started_at=_when(job.get("started_at")),
        finished_at=_when(job.get("finished_at")) if status in _FINISHED else None,
        last_attempted_at=_when(job.get("started_at")),
        args=args,
        kwargs=kwargs,
        backend=backend,
        errors=_errors(job),
        worker_ids=[str(job.get("worker") or "jobq")] * int(attempt),
    )
    raw = job.get("result")
    if status == SUCCESSFUL and raw is not None:
        value = orjson.loads(raw) if isinstance(raw, str | bytes) else raw
        object.__setattr__(result, "_return_value", value)
    return result
