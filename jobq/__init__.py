"""jobq: a job queue for web applications that never loses an accepted job (``README.md``).

``import jobq`` is all an application needs (the command line is ``jobq.cli``, ``jobq --help``)::

    import jobq

    registry = jobq.Registry()   # or the default one: jobq.registry, @jobq.job(...)

    @registry.job("email.send", queue="emails", max_attempts=5, retry_on=(ConnectionError,))
    async def send(to: str, subject: str) -> str:
        ...
        return "sent"

    handle = send.enqueue("ada@example.com", subject="hi")      # jobq.Client.from_env(): JOBQ_URL, JOBQ_TOKEN
    handle.result(timeout=30)                                    # "sent", typed str
    send.options(delay=60, priority=1).enqueue("bob@example.com", subject="later")

Run the handlers with ``jobq worker --app myapp.jobs:registry`` (or your whole app on the local stack with
``jobq dev``), test them with :mod:`jobq.testing`. The names below load on first use, so importing ``jobq``
is cheap.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

__version__ = "0.1.0"

if TYPE_CHECKING:
    from jqcore.backoff import Backoff
    from jqcore.errors import Cancel, JobqError, Retry, Snooze
    from jqcore.graphs import Graph, Step, chain, fan_out, group, pipeline
    from jqruntime.client import (
        AsyncClient,
        AsyncJobHandle,
        Client,
        JobCanceled,
        JobFailed,
        JobHandle,
        JobOptions,
    )
    from worker.batch import BatchItem
    from worker.hooks import StartupFailed, WorkerContext
    from worker.registry import JobContext, JobSpec, PayloadInvalid, Registry, current_job
    from worker.tail import defer_to

    registry = Registry()
    """The default registry (``jobq worker --app myapp.jobs`` serves a module's ``registry``)."""
    job = registry.job

__all__ = [
    "AsyncClient",
    "AsyncJobHandle",
    "Backoff",
    "BatchItem",
    "Cancel",
    "Client",
    "Graph",
    "JobCanceled",
    "JobContext",
    "JobFailed",
    "JobHandle",
    "JobOptions",
    "JobSpec",
    "JobqError",
    "PayloadInvalid",
    "Registry",
    "Retry",
    "Snooze",
    "StartupFailed",
    "Step",
    "WorkerContext",
    "__version__",
    "chain",
    "current_job",
    "defer_to",
    "fan_out",
    "group",
    "job",
    "pipeline",
    "registry",
]

_FROM = {
    "jqcore.backoff": ("Backoff",),
    "jqcore.errors": ("Cancel", "JobqError", "Retry", "Snooze"),
    "jqcore.graphs": ("Graph", "Step", "chain", "fan_out", "group", "pipeline"),
    "jqruntime.client": (
        "AsyncClient",
        "AsyncJobHandle",
        "Client",
        "JobCanceled",
        "JobFailed",
        "JobHandle",
        "JobOptions",
    ),
    "worker.batch": ("BatchItem",),
    "worker.hooks": ("StartupFailed", "WorkerContext"),
    "worker.registry": ("JobContext", "JobSpec", "PayloadInvalid", "Registry", "current_job"),
    "worker.tail": ("defer_to",),
}
_WHERE = {name: module for module, names in _FROM.items() for name in names}


def __getattr__(name: str) -> object:
    if name in ("registry", "job"):  # the default registry: made on first use
        from worker.registry import Registry

        default = globals().setdefault("registry", Registry())
        globals()["job"] = default.job
        return globals()[name]
    if name in _WHERE:
        value = getattr(importlib.import_module(_WHERE[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'jobq' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(__all__)
