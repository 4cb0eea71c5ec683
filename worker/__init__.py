"""worker: run jobq jobs in Python.

A minimal application::

    # myapp/jobs.py
    from worker import Backoff, Registry, Retry, current_job

    registry = Registry()

    @registry.job("email.send", queue="emails", max_attempts=5, backoff=Backoff(base_s=2))
    async def send(to: str, subject: str) -> None:
        if current_job().attempt > 1:
            ...  # a retry: the previous attempt failed
        if not await smtp_ready():
            raise Retry(30, "smtp down")  # try again in 30 s (Retry() takes the backoff)

run by ``jobq worker --app myapp.jobs:registry --queues emails``, or by ``python -m worker`` with
``JOBQ_WORKER_APP=myapp.jobs:registry JOBQ_WORKER_QUEUES=emails`` (docs/workers.md, docs/settings.md).

Importing this package is cheap (the registry and the handler controls); ``run``, ``WorkerSettings`` and
``BatchItem``, which pull in Redis and the settings machinery, load on first use.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from jqcore.backoff import Backoff
from jqcore.errors import Cancel, Retry, Snooze
from worker.hooks import StartupFailed, WorkerContext
from worker.middleware import CallNext
from worker.registry import JobContext, JobSpec, PayloadInvalid, Registry, current_job
from worker.tail import Deferred, defer_to

if TYPE_CHECKING:
    from worker.batch import BatchItem
    from worker.main import run
    from worker.settings import WorkerSettings

__all__ = [
    "Backoff",
    "BatchItem",
    "CallNext",
    "Cancel",
    "Deferred",
    "JobContext",
    "JobSpec",
    "PayloadInvalid",
    "Registry",
    "Retry",
    "Snooze",
    "StartupFailed",
    "WorkerContext",
    "WorkerSettings",
    "current_job",
    "defer_to",
    "run",
]

_LAZY = {"BatchItem": "worker.batch", "WorkerSettings": "worker.settings", "run": "worker.main"}


def __getattr__(name: str) -> object:
    """``run``, ``WorkerSettings`` and ``BatchItem`` on first use (they import Redis, pydantic-settings)."""
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'worker' has no attribute {name!r}")
