"""The ``django.tasks`` API, from Django itself (6.0 and later) or from the ``django-tasks`` backport.

Django 6 ships ``django.tasks`` but needs Python >= 3.12; on Python 3.11 the reference backport
``django-tasks`` (the same API, DEP 14) runs on Django 5.2. Everything in jqdjango imports the API from
here, so one code base serves both; the backport's two names that differ (``InvalidTaskError``) are
given Django's.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, cast

__all__ = [
    "FAILED",
    "READY",
    "RUNNING",
    "SOURCE",
    "SUCCESSFUL",
    "BaseTaskBackend",
    "InvalidTask",
    "Task",
    "TaskContext",
    "TaskError",
    "TaskResult",
    "TaskResultDoesNotExist",
    "TaskResultStatus",
    "task",
    "task_backends",
    "task_enqueued",
    "task_finished",
    "task_started",
]

if TYPE_CHECKING:  # type-checked against the backport (this repository's Python is 3.11)
    from django_tasks import TaskContext, TaskResult, TaskResultStatus, task, task_backends
    from django_tasks.backends.base import BaseTaskBackend
    from django_tasks.base import Task, TaskError
    from django_tasks.exceptions import InvalidTaskError as InvalidTask
    from django_tasks.exceptions import TaskResultDoesNotExist
    from django_tasks.signals import task_enqueued, task_finished, task_started

    SOURCE = "django_tasks"
else:
    try:
        from django.tasks import TaskContext, TaskResult, TaskResultStatus, task, task_backends
        from django.tasks.backends.base import BaseTaskBackend
        from django.tasks.base import Task, TaskError
        from django.tasks.exceptions import InvalidTask, TaskResultDoesNotExist
        from django.tasks.signals import task_enqueued, task_finished, task_started

        SOURCE = "django.tasks"
    except ImportError:
        try:
            from django_tasks import TaskContext, TaskResult, TaskResultStatus, task, task_backends
            from django_tasks.backends.base import BaseTaskBackend
            from django_tasks.base import Task, TaskError
            from django_tasks.exceptions import InvalidTaskError as InvalidTask
            from django_tasks.exceptions import TaskResultDoesNotExist
            from django_tasks.signals import task_enqueued, task_finished, task_started
        except ImportError as exc:
            raise ImportError(
                "jqdjango needs Django >= 6.0 (django.tasks) or the django-tasks backport: "
                "pip install 'jobq[django]'"
            ) from exc

        SOURCE = "django_tasks"

# Typed once here: Django's TextChoices is untyped (Any) to mypy, so its members would read as tuples.
READY = cast("TaskResultStatus", TaskResultStatus.READY)
RUNNING = cast("TaskResultStatus", TaskResultStatus.RUNNING)
SUCCESSFUL = cast("TaskResultStatus", TaskResultStatus.SUCCESSFUL)
FAILED = cast("TaskResultStatus", TaskResultStatus.FAILED)
