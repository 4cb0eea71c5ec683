"""worker: the pool that runs jobq jobs in Python (``jobq worker --app myapp.jobs:registry``).

An application imports what it needs from ``jobq`` (``jobq.Registry``, ``jobq.current_job``, ``jobq.Retry``,
``jobq.defer_to``...: ``docs/workers.md``). The names this package exported before that front door existed
still work for this release, and say once that they moved (``DeprecationWarning``); ``run`` and
``WorkerSettings`` stay here (they are the pool's). Importing this package is cheap: everything loads on
first use.
"""

from __future__ import annotations

import importlib
import warnings
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from worker.main import run
    from worker.settings import WorkerSettings

__all__ = ["WorkerSettings", "run"]

_POOL = {"WorkerSettings": "worker.settings", "run": "worker.main"}
_MOVED = {
    "Backoff": "jqcore.backoff",
    "BatchItem": "worker.batch",
    "Cancel": "jqcore.errors",
    "Deferred": "worker.tail",
    "JobContext": "worker.registry",
    "JobSpec": "worker.registry",
    "PayloadInvalid": "worker.registry",
    "Registry": "worker.registry",
    "Retry": "jqcore.errors",
    "Snooze": "jqcore.errors",
    "StartupFailed": "worker.hooks",
    "WorkerContext": "worker.hooks",
    "current_job": "worker.registry",
    "defer_to": "worker.tail",
}
_warned: set[str] = set()


def __getattr__(name: str) -> object:
    if name in _POOL:
        return getattr(importlib.import_module(_POOL[name]), name)
    if name in _MOVED:
        if not _warned:
            warnings.warn(
                f"`from worker import {name}` is deprecated: import it from jobq (`from jobq import {name}`);"
                " the old names go in the next release",
                DeprecationWarning,
                stacklevel=2,
            )
        _warned.add(name)
        return getattr(importlib.import_module(_MOVED[name]), name)
    raise AttributeError(f"module 'worker' has no attribute {name!r}")
