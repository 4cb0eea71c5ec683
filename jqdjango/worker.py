"""A jobq worker that runs Django's tasks: ``JOBQ_WORKER_APP=jqdjango.worker`` (or ``manage.py jobq_worker``).

::

    DJANGO_SETTINGS_MODULE=mysite.settings JOBQ_WORKER_APP=jqdjango.worker JOBQ_WORKER_QUEUES=default \\
        python -m worker

The registry here resolves a job's kind — a task's module path, as :class:`~jqdjango.backend.JobqBackend`
enqueues it — to the ``@task`` at that path on first sight, so tasks need no registration of their own.
Only ``Task`` objects of ``INSTALLED_APPS`` modules run (no other module is imported for a kind): a kind
naming anything else stays unhandled (handed back, as for any kind a
pool lacks). Sync tasks run in the pool's threads, async tasks on its loop; Django's database connections
are closed around each sync task as a request's are. A task's return value must be JSON (at most 64 KiB):
anything else fails the task, instead of completing it with no result. Django's ``task_started`` and
``task_finished`` signals are sent around each run.
"""

from __future__ import annotations

import inspect
import traceback
from typing import Any

import orjson
from django.apps import apps
from django.utils import timezone
from django.utils.module_loading import import_string

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
from worker.execute import MAX_RESULT_BYTES
from worker.registry import JobSpec, Registry, current_job

__all__ = ["DjangoRegistry", "ResultInvalid"]  # and `registry`, made on first use (__getattr__)


MAX_REMEMBERED = 10_000
"""Kinds remembered as not a task at most (they come from job records)."""


class ResultInvalid(TypeError):
    """A task returned something jobq cannot keep as its result (not JSON, or over 64 KiB)."""


class DjangoRegistry(Registry):
    """A :class:`worker.Registry` that also serves every Django ``@task`` by its module path."""

    def __init__(self) -> None:
        super().__init__()
        self._tasks: dict[str, JobSpec[Any, Any] | None] = {}

    def get(self, kind: str) -> JobSpec[Any, Any] | None:
        spec = super().get(kind)
        if spec is None:
            if kind in self._tasks:
                return self._tasks[kind]
            spec = _spec_of(kind)
            if spec is not None or len(self._tasks) < MAX_REMEMBERED:  # unknown kinds: bounded
                self._tasks[kind] = spec
        return spec


def _in_an_app(kind: str) -> bool:
    """Only modules of ``INSTALLED_APPS`` are imported for a kind: a job's kind is text anyone with an
    enqueue token wrote, and importing an arbitrary module runs its top-level code."""
    return any(kind.startswith(app.name + ".") for app in apps.get_app_configs())


def _spec_of(kind: str) -> JobSpec[Any, Any] | None:
    if not _in_an_app(kind):
        return None
    try:
        task = import_string(kind)
    except ImportError:
        return None
    if not isinstance(task, Task):
        return None
    if inspect.iscoroutinefunction(task.func):

        async def run_async(args: list[Any], kwargs: dict[str, Any]) -> Any:
            started = _running(task, args, kwargs)
            try:
                value = await task.func(*_with_context(task, started, args), **kwargs)
            except Exception as exc:
                _finished(started, exc=exc)
                raise
            return _finished(started, value)

        return JobSpec(kind, run_async, mode="async")

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

    return JobSpec(kind, run_sync, mode="thread")


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
