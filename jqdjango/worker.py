"""A jobq worker that runs Django's tasks: ``JOBQ_WORKER_APP=jqdjango.worker`` (or ``manage.py jobq_worker``).

::

    DJANGO_SETTINGS_MODULE=mysite.settings JOBQ_WORKER_APP=jqdjango.worker JOBQ_WORKER_QUEUES=default \\
        python -m worker

The registry here resolves a job's kind — a task's module path, as :class:`~jqdjango.backend.JobqBackend`
enqueues it — against the tasks it **discovered at start**, so tasks need no registration of their own:
the ``tasks`` module of each app of ``INSTALLED_APPS`` is imported once, as Django's own autodiscovery
(``autodiscover_modules("tasks")``) imports ``admin`` modules, and every ``@task`` found in those modules
(and in their submodules, and imported into them) is served by its module path. A job's kind never makes
the worker import anything: it is text an enqueuing client wrote, and importing a module runs its
top-level code. A kind naming any other module of an app (``myapp.tests.x``, a management command), a task
defined in a module no ``tasks`` module imports, or an app whose ``tasks`` module failed to import (any
exception: logged once at start, never retried per job) stays unhandled (handed back, as for any kind a
pool lacks). Sync tasks run in the pool's threads, async tasks on its loop; Django's database connections
are closed around each sync task as a request's are. A task's return value must be JSON (at most 64 KiB):
anything else fails the task, instead of completing it with no result. Django's ``task_started`` and
``task_finished`` signals are sent around each run.
"""

from __future__ import annotations

import inspect
import sys
import traceback
from importlib import import_module
from typing import Any

import orjson
from django.apps import apps
from django.utils import timezone
from django.utils.module_loading import module_has_submodule

from jqcore.log import get_logger
from jqdjango.compat import (
    FAILED,
    SUCCESSFUL,
    Task,
    TaskContext,
    TaskError,
    TaskResult,
    task_finished,
    task_started,
)
from jqdjango.results import STATUS
from jqengine import MAX_RESULT_BYTES
from worker.registry import JobSpec, Registry, current_job

__all__ = ["TASKS_MODULE", "DjangoRegistry", "ResultInvalid", "discover"]  # and `registry` (__getattr__)

log = get_logger("jqdjango.worker")

TASKS_MODULE = "tasks"
"""The module of each installed app imported at start for its tasks (Django's autodiscovery convention)."""


class ResultInvalid(TypeError):
    """A task returned something jobq cannot keep as its result (not JSON, or over 64 KiB)."""


class DjangoRegistry(Registry):
    """A :class:`worker.Registry` that also serves every Django ``@task`` :func:`discover` found when it
    was made, by its module path. ``failed``: the apps whose ``tasks`` module raised on import (app →
    the exception's repr), their tasks unknown until the next start."""

    def __init__(self) -> None:
        super().__init__()
        found, self.failed = discover()
        self._tasks: dict[str, JobSpec[Any, Any]] = {
            kind: _spec_of(kind, task) for kind, task in found.items()
        }
        log.info("Django tasks discovered", tasks=len(self._tasks), failed=sorted(self.failed))

    def get(self, kind: str) -> JobSpec[Any, Any] | None:
        spec = super().get(kind)
        return spec if spec is not None else self._tasks.get(kind)

    def task_kinds(self) -> list[str]:
        """The kinds of the Django tasks discovered at start."""
        return sorted(self._tasks)


def discover() -> tuple[dict[str, Task[Any, Any]], dict[str, str]]:
    """Import the ``tasks`` module of every installed app once (a module Python already imported is not run
    again) and collect the ``@task`` objects of those modules and of their imported submodules, by module
    path, where that path is in an installed app. An app whose ``tasks`` module raises (any exception) is
    logged and left out: returned as app name → the exception's repr."""
    configs = list(apps.get_app_configs())
    failed: dict[str, str] = {}
    for app in configs:
        if not module_has_submodule(app.module, TASKS_MODULE):
            continue
        try:
            import_module(f"{app.name}.{TASKS_MODULE}")
        except Exception as exc:  # its top-level code raised: remembered, never retried per job
            log.error(
                "an app's tasks module failed to import; its tasks are unknown", app=app.name, error=repr(exc)
            )
            failed[app.name] = repr(exc)
    in_apps = tuple(f"{app.name}." for app in configs)
    roots = tuple(f"{app.name}.{TASKS_MODULE}" for app in configs if app.name not in failed)
    found: dict[str, Task[Any, Any]] = {}
    for name, module in list(sys.modules.items()):
        if module is None or not any(name == r or name.startswith(r + ".") for r in roots):
            continue
        for value in list(vars(module).values()):
            if isinstance(value, Task) and value.module_path.startswith(in_apps):
                found.setdefault(value.module_path, value)
    return found, failed


def _spec_of(kind: str, task: Task[Any, Any]) -> JobSpec[Any, Any]:
    if inspect.iscoroutinefunction(task.func):

        async def run_async(args: list[Any], kwargs: dict[str, Any]) -> Any:
            started = _running(task, args, kwargs)
            try:
                value = await task.func(*_with_context(task, started, args), **kwargs)
            except Exception as exc:
                _finished(started, exc=exc)
                raise
            return _finished(started, value)

        return JobSpec(kind=kind, fn=run_async, mode="async")

    def run_sync(args: list[Any], kwargs: dict[str, Any]) -> Any:
        from django.db import close_old_connections

        started = _running(task, args, kwargs)
        close_old_connections()
        try:
            value = task.func(*_with_context(task, started, args), **kwargs)
        except Exception as exc:
            _finished(started, exc=exc)
            raise
        finally:
            close_old_connections()
        return _finished(started, value)

    return JobSpec(kind=kind, fn=run_sync, mode="thread")


def _running(task: Task[Any, Any], args: list[Any], kwargs: dict[str, Any]) -> TaskResult[Any]:
    """The RUNNING result of the current job (the context a ``takes_context`` task gets)."""
    job = current_job()
    now = timezone.now()
    result: TaskResult[Any] = TaskResult(
        task=task,
        id=job.id,
        status=STATUS["running"],
        enqueued_at=None,
        started_at=now,
        finished_at=None,
        last_attempted_at=now,
        args=args,
        kwargs=kwargs,
        backend=task.backend,
        errors=[],
        worker_ids=[job.worker.pool or "jobq"] * job.attempt,
    )
    task_started.send(type(task.get_backend()), task_result=result)
    return result


def _with_context(task: Task[Any, Any], result: TaskResult[Any], args: list[Any]) -> list[Any]:
    return [TaskContext(task_result=result), *args] if task.takes_context else args


def _finished(result: TaskResult[Any], value: Any = None, exc: BaseException | None = None) -> Any:
    """Record how the run ended on ``result`` and send ``task_finished``; a return value jobq cannot keep
    (not JSON, over 64 KiB) fails the task (:class:`ResultInvalid`). Returns the value (the job's result)."""
    invalid = None if exc is not None else _invalid(value)
    failure = exc or invalid
    if failure is None:
        object.__setattr__(result, "status", SUCCESSFUL)
        object.__setattr__(result, "_return_value", value)
    else:
        object.__setattr__(result, "status", FAILED)
        path = f"{type(failure).__module__}.{type(failure).__qualname__}"
        text = "".join(traceback.format_exception(failure))
        result.errors.append(TaskError(exception_class_path=path, traceback=text))
    object.__setattr__(result, "finished_at", timezone.now())
    task_finished.send(type(result.task.get_backend()), task_result=result)
    if invalid is not None:
        raise invalid
    return value


def _invalid(value: Any) -> ResultInvalid | None:
    try:
        size = len(orjson.dumps(value))
    except TypeError as exc:
        return ResultInvalid(f"the task's return value is not JSON: {exc}")
    if size > MAX_RESULT_BYTES:
        return ResultInvalid(f"the task's return value is {size} bytes of JSON; at most {MAX_RESULT_BYTES}")
    return None


def __getattr__(name: str) -> Any:
    """``registry`` (what ``JOBQ_WORKER_APP=jqdjango.worker`` loads): sets Django up on first use."""
    if name != "registry":
        raise AttributeError(f"module 'jqdjango.worker' has no attribute {name!r}")
    import django
    from django.apps import apps

    if not apps.ready:
        django.setup()
    globals()["registry"] = made = DjangoRegistry()
    return made
