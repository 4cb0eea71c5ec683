"""``jqdjango.backend.JobqBackend``: Django's tasks enqueued through jobq's gateway, durable in Kafka.

::

    TASKS = {
        "default": {
            "BACKEND": "jqdjango.backend.JobqBackend",
            "QUEUES": ["default", "emails"],
            "OPTIONS": {"gateways": ["http://gw-a:28080"], "token": "...", "queues": {"emails": "mail"}},
        }
    }

A task is one jobq job: its kind is the task's module path, its args ``{"args": [...], "kwargs": {...}}``,
its id ``<jobq queue>:<26 chars>`` (also the result id, so ``get_result`` knows the queue to ask).
``enqueue`` returns once the gateway answered, that is once Kafka has the job. Priority becomes jobq's
deadline rank (see :class:`~jqdjango.options.BackendOptions`), ``run_after`` its ``run_at``. A jobq worker
runs the tasks (:mod:`jqdjango.worker`). This module imports the kernel (jqcore) and the app-side client
(jqruntime.client) only, never the worker, the engine or a server.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, ParamSpec, TypeVar

from django.utils import timezone
from django.utils.module_loading import import_string
from pydantic import ValidationError

from jqcore.clock import now_ms
from jqcore.envelope import new_job_id
from jqcore.envelope_rules import check_name
from jqdjango.compat import (
    READY,
    BaseTaskBackend,
    InvalidTask,
    Task,
    TaskResult,
    TaskResultDoesNotExist,
    task_enqueued,
)
from jqdjango.options import BackendOptions
from jqdjango.results import to_result
from jqruntime.client import ApiRefused, JobqClient
from jqruntime.client.portal import Portal

__all__ = ["JobqBackend", "split_result_id"]

P = ParamSpec("P")
T = TypeVar("T")


def split_result_id(result_id: str) -> tuple[str, str]:
    """``<queue>:<job id>`` → (queue, job id); ``TaskResultDoesNotExist`` for any other shape."""
    queue, colon, _ = result_id.partition(":")
    if not colon or check_name("queue", queue) or check_name("id", result_id):
        raise TaskResultDoesNotExist(f"{result_id!r} is not a jobq task result id")
    return queue, result_id


class JobqBackend(BaseTaskBackend):
    supports_defer = True
    supports_async_task = True
    supports_get_result = True
    supports_priority = True

    def __init__(self, alias: str, params: dict[str, Any]) -> None:
        super().__init__(alias, params)
        try:
            self.settings = BackendOptions.model_validate(self.options)
        except ValidationError as exc:
            from django.core.exceptions import ImproperlyConfigured

            raise ImproperlyConfigured(f"TASKS[{alias!r}]['OPTIONS']: {exc}") from None
        self.portal = Portal(self._client)

    def _client(self) -> JobqClient:
        s = self.settings
        return JobqClient(s.gateway_list(), s.token, az=s.az, deadline_s=s.deadline_s)

    def close(self) -> None:
        self.portal.close()

    # ---- enqueue ----------------------------------------------------------------------------------
    def validate_task(self, task: Task[Any, Any]) -> None:
        super().validate_task(task)
        try:
            self.settings.jobq_queue(task.queue_name)
        except ValueError as exc:
            raise InvalidTask(str(exc)) from None
        problem = check_name("kind", task.module_path)
        if problem:
            raise InvalidTask(f"task path {task.module_path!r} as a jobq kind {problem}")

    def job(
        self, task: Task[Any, Any], args: Any, kwargs: Any
    ) -> tuple[str, dict[str, Any], TaskResult[Any]]:
        """The jobq queue, the API job and the READY result of one call (``args`` made JSON as Django
        does: tuples become lists; anything JSON cannot hold is ``TypeError``)."""
        self.validate_task(task)
        queue = self.settings.jobq_queue(task.queue_name)
        result: TaskResult[Any] = TaskResult(
            task=task,
            id=f"{queue}:{new_job_id()}",
            status=READY,
            enqueued_at=None,
            started_at=None,
            finished_at=None,
            last_attempted_at=None,
            args=list(args),
            kwargs=dict(kwargs),
            backend=self.alias,
            errors=[],
            worker_ids=[],
        )
        now = now_ms()
        job: dict[str, Any] = {
            "id": result.id,
            "kind": task.module_path,
            "args": {"args": result.args, "kwargs": result.kwargs},
        }
        if task.priority:
            job["priority"] = now - task.priority * self.settings.priority_step_ms
        if task.run_after is not None:
            job["run_at"] = _ms(task.run_after)
        if self.settings.max_attempts is not None:
            job["max_attempts"] = self.settings.max_attempts
        object.__setattr__(result, "enqueued_at", timezone.now())
        return queue, job, result

    def enqueue(self, task: Task[P, T], args: Any, kwargs: Any) -> TaskResult[T]:
        queue, job, result = self.job(task, args, kwargs)
        self.portal.call(lambda client: client.enqueue(queue, [job]))
        task_enqueued.send(type(self), task_result=result)
        return result

    async def aenqueue(self, task: Task[P, T], args: Any, kwargs: Any) -> TaskResult[T]:
        queue, job, result = self.job(task, args, kwargs)
        await self.portal.acall(lambda client: client.enqueue(queue, [job]))
        task_enqueued.send(type(self), task_result=result)
        return result

    # ---- results ----------------------------------------------------------------------------------
    def get_result(self, result_id: str) -> TaskResult[Any]:
        queue, job_id = split_result_id(result_id)
        return self._result(result_id, self.portal.call(lambda client: _get(client, queue, job_id)))

    async def aget_result(self, result_id: str) -> TaskResult[Any]:
        queue, job_id = split_result_id(result_id)
        return self._result(result_id, await self.portal.acall(lambda client: _get(client, queue, job_id)))

    def _result(self, result_id: str, job: dict[str, Any] | None) -> TaskResult[Any]:
        if job is None:
            raise TaskResultDoesNotExist(
                f"no task {result_id!r}: not yet relayed (just enqueued), or past the queue's retention"
            )
        kind = job.get("kind")
        if not kind:  # the far-future tier keeps only its run_at in Redis; the record is in Kafka
            raise TaskResultDoesNotExist(
                f"task {result_id!r} is deferred past the far-future horizon: its task is known once it is"
                " due within the horizon"
            )
        try:
            task = import_string(kind)
        except ImportError:
            task = None
        if not isinstance(task, Task):
            raise TaskResultDoesNotExist(f"job {result_id!r} is of kind {kind!r}, which is no Django task")
        return to_result(task, job, self.alias)


async def _get(client: JobqClient, queue: str, job_id: str) -> dict[str, Any] | None:
    try:
        return await client.get_job(queue, job_id)
    except ApiRefused as exc:
        if exc.code in ("queue_invalid", "id_invalid"):
            return None
        raise


def _ms(when: datetime) -> int:
    if timezone.is_naive(when):  # USE_TZ = False (Django refuses a naive run_after otherwise)
        when = timezone.make_aware(when)  # in Django's current time zone
    return round(when.timestamp() * 1000)
