"""Django's tasks on jobq (jqdjango) against the real path: ``@task`` → ``.enqueue()`` → gateway → Kafka →
relay → Redis → a jobq pool serving :class:`jqdjango.worker.DjangoRegistry` → ``get_result``.

Django's own test patterns: settings configured in the test process once (``settings.configure``,
``django.setup()``), each test's backend given by ``override_settings(TASKS=...)`` (which resets the task
backends). Django 6 is not installable on this Python (3.11): the ``django-tasks`` backport gives the same
API on Django 5.2 (:mod:`jqdjango.compat`). The sync calls (``enqueue``, ``get_result``) run in a thread:
this test's loop also runs the gateway they talk to.
"""

from __future__ import annotations

import asyncio
import sys
import textwrap
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import django
import pytest
from django.conf import settings
from django.test import override_settings
from django.utils import timezone

from jqdjango.backend import JobqBackend
from jqdjango.compat import FAILED, READY, SUCCESSFUL, TaskResult, TaskResultDoesNotExist, task_backends
from jqdjango.worker import DjangoRegistry
from jqstack.pipeline import checkout_env
from jqstack.supervise import python_m
from worker.pool import Pool, PoolConfig

if not settings.configured:
    settings.configure(
        SECRET_KEY="test", USE_TZ=True, DATABASES={}, INSTALLED_APPS=["jqdjango", "examples.djangoapp"]
    )
    django.setup()

Eventually = Callable[..., Awaitable[Any]]
STEP_MS = 60_000


@dataclass
class Django:
    queue: str
    backend: JobqBackend
    tasks: Any  # the module examples.djangoapp.tasks
    eventually: Eventually
    engine: Any
    redis: Any

    def pool(self) -> Pool:
        """A jobq pool running the Django tasks of this test's queue, one at a time."""
        return Pool(DjangoRegistry(), self.engine, PoolConfig([self.queue], concurrency=1), redis=self.redis)

    async def finished(self, result: TaskResult[Any], timeout_s: float = 20) -> TaskResult[Any]:
        """The result, read through ``aget_result``, once it is finished."""

        async def read() -> TaskResult[Any] | None:
            try:
                return await self.backend.aget_result(result.id)
            except TaskResultDoesNotExist:  # not relayed yet
                return None

        done: TaskResult[Any] = await self.eventually(
            read, lambda r: r is not None and r.is_finished, timeout_s
        )
        return done


@pytest.fixture
def dj(path: Any, token: str, eventually: Eventually) -> Iterator[Django]:
    gateway = path.client.gateways[0].url
    tasks_setting = {
        "default": {
            "BACKEND": "jqdjango.backend.JobqBackend",
            "QUEUES": ["default", "urgent"],
            "OPTIONS": {
                "gateways": [gateway],
                "token": token,
                "queues": {"default": path.queue, "urgent": path.queue + ".urgent"},
                "priority_step_ms": STEP_MS,
            },
        }
    }
    with override_settings(TASKS=tasks_setting):
        from examples.djangoapp import tasks

        backend = task_backends["default"]
        assert isinstance(backend, JobqBackend)
        try:
            yield Django(path.queue, backend, tasks, eventually, path.engine, path.redis)
        finally:
            backend.close()


async def test_enqueue_run_and_read_back_sync_async_and_with_context(dj: Django, path: Any) -> None:
    t = dj.tasks
    added = await asyncio.to_thread(t.add.enqueue, 2, 3)  # the sync API, from a plain thread
    shouted = await t.shout.aenqueue("hello")
    seen = await t.context_seen.aenqueue(note="n")
    assert added.status == READY
    assert added.id.startswith(f"{dj.queue}:")
    job = await path.client.get_job(dj.queue, added.id)  # durable: the gateway answered once Kafka had it
    assert job is None or job["kind"] == "examples.djangoapp.tasks.add"
    async with dj.pool():
        done = await dj.finished(added)
        assert done.status == SUCCESSFUL
        assert done.return_value == 5
        assert (done.args, done.kwargs, done.attempts) == ([2, 3], {}, 1)
        assert done.started_at is not None
        assert done.finished_at is not None
        assert (await dj.finished(shouted)).return_value == "HELLO"
        context = (await dj.finished(seen)).return_value
        assert context == {"id": seen.id, "attempt": 1, "note": "n"}
    again = await asyncio.to_thread(t.add.get_result, added.id)  # Task.get_result: the sync read
    assert again.return_value == 5
    await added.arefresh()
    assert added.status == SUCCESSFUL


async def test_a_failing_task_is_failed_with_its_error(dj: Django) -> None:
    failing = await dj.tasks.fails.aenqueue("boom")
    async with dj.pool():
        done = await dj.finished(failing)
    assert done.status == FAILED
    assert len(done.errors) == 1
    assert done.attempts == 1
    error = done.errors[0]
    assert error.exception_class is ValueError
    assert "ValueError: boom" in error.traceback
    assert "fails" in error.traceback
    with pytest.raises(ValueError, match="failed"):
        _ = done.return_value


async def test_priority_and_queue_names_are_mapped(dj: Django, path: Any) -> None:
    t = dj.tasks
    started = time.monotonic()
    low = await t.nap.using(priority=-10).aenqueue("low")
    high = await t.nap.using(priority=10).aenqueue("high")
    elapsed_ms = (time.monotonic() - started) * 1000
    urgent = await t.add.using(queue_name="urgent").aenqueue(1, 1)
    assert urgent.id.startswith(f"{dj.queue}.urgent:")
    jobs = await dj.eventually(
        lambda: asyncio.gather(*(path.client.get_job(dj.queue, r.id) for r in (low, high))),
        lambda js: all(js),
        timeout_s=20,
    )
    # each ranked as if enqueued `priority` minutes earlier: 20 minutes apart, less the time between the two
    apart = jobs[0]["priority"] - jobs[1]["priority"]
    assert 20 * STEP_MS - elapsed_ms - 1 <= apart <= 20 * STEP_MS
    async with dj.pool():
        ran_low, ran_high = await dj.finished(low), await dj.finished(high)
    assert ran_high.started_at is not None
    assert ran_low.started_at is not None
    assert ran_high.finished_at is not None
    assert ran_high.finished_at <= ran_low.started_at
    assert (await dj.eventually(lambda: path.client.get_job(dj.queue + ".urgent", urgent.id), bool, 20))[
        "state"
    ] == "pending"  # its own jobq queue, which this pool does not serve


@pytest.mark.usefixtures("scheduler")  # promotes delayed jobs
async def test_run_after_defers_the_task(dj: Django, path: Any) -> None:
    when = timezone.now() + timedelta(seconds=1.5)
    later = await dj.tasks.add.using(run_after=when).aenqueue(20, 22)
    async with dj.pool():
        job = await dj.eventually(lambda: path.client.get_job(dj.queue, later.id), bool, 20)
        assert job["run_at"] == round(when.timestamp() * 1000)
        done = await dj.finished(later)
    assert done.return_value == 42
    assert done.started_at is not None
    assert done.started_at >= when - timedelta(milliseconds=1)


async def test_result_ids_of_no_task(dj: Django) -> None:
    with pytest.raises(TaskResultDoesNotExist):
        await dj.backend.aget_result("no-colon")
    with pytest.raises(TaskResultDoesNotExist):
        await dj.backend.aget_result(f"{dj.queue}:0123456789abcdef0123456789")


async def test_manage_py_jobq_worker_runs_the_tasks(
    dj: Django, path: Any, token: str, endpoints: Any
) -> None:
    """The management command (``python -m django jobq_worker``, as ``manage.py`` runs it) in a process of
    its own, with the example project's settings: it loads ``jqdjango.worker``'s registry as ``python -m
    worker`` does, serves the backend's queues and, with ``--burst``, exits once they are empty."""
    added = await dj.tasks.add.aenqueue(40, 2)
    urgent = await dj.tasks.shout.using(queue_name="urgent").aenqueue("now")
    for r in (added, urgent):  # in Redis: a burst worker finds them
        await dj.eventually(lambda r=r: path.client.get_job(r.id.partition(":")[0], r.id), bool, 20)
    env = checkout_env(
        DJANGO_SETTINGS_MODULE="examples.djangoapp.settings",
        JOBQ_URL=path.client.gateways[0].url,
        JOBQ_TOKEN=token,
        JOBQ_DJANGO_QUEUE=dj.queue,
        JOBQ_REDIS_URL=endpoints.redis_url,
    )
    proc = await asyncio.create_subprocess_exec(
        *python_m("django", "jobq_worker", "--burst"),
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    try:
        out, _ = await asyncio.wait_for(proc.communicate(), 60)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    assert proc.returncode == 0, out.decode()
    assert (await dj.backend.aget_result(added.id)).return_value == 42
    assert (await dj.backend.aget_result(urgent.id)).return_value == "NOW"


def test_a_kind_outside_the_installed_apps_is_never_imported() -> None:
    """A kind is text an enqueuing client wrote: the worker imports only INSTALLED_APPS' modules."""
    assert "wave" not in sys.modules
    assert DjangoRegistry().get("wave.open") is None
    assert "wave" not in sys.modules, "importing a module runs its top-level code"
    assert DjangoRegistry().get("examples.djangoapp.tasks.add") is not None


def _app(root: Path, name: str, files: dict[str, str]) -> None:
    (root / name).mkdir()
    (root / name / "__init__.py").write_text("")
    for module, text in files.items():
        (root / name / f"{module}.py").write_text(textwrap.dedent(text))


def test_kinds_resolve_only_to_tasks_discovered_at_start(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Security review L2: each app's ``tasks`` module is imported once, when the registry is made; a kind
    naming another module of an app (a script, tests, a management command) is unknown and never
    imported, and an app whose ``tasks`` module raises is logged once and never retried per job."""
    ran = tmp_path / "ran.txt"
    _app(
        tmp_path,
        "l2app",
        {
            "tasks": """
                from jqdjango.compat import task
                from l2app.helpers import shared

                @task
                def ok() -> int:
                    return 1
            """,
            "helpers": """
                from jqdjango.compat import task

                @task
                def shared() -> int:
                    return 2
            """,
            "scripts": f"""
                with open({str(ran)!r}, "a") as out:
                    out.write("scripts ran\\n")
                from jqdjango.compat import task

                @task
                def wipe() -> None: ...
            """,
        },
    )
    _app(
        tmp_path,
        "l2broken",
        {
            "tasks": f"""
                with open({str(ran)!r}, "a") as out:
                    out.write("broken ran\\n")
                raise RuntimeError("boom")
            """
        },
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    with override_settings(INSTALLED_APPS=["jqdjango", "examples.djangoapp", "l2app", "l2broken"]):
        registry = DjangoRegistry()
        assert registry.get("l2app.tasks.ok") is not None
        assert registry.get("l2app.helpers.shared") is not None, "a task its tasks module imports"
        assert registry.get("examples.djangoapp.tasks.add") is not None
        for _ in range(3):
            assert registry.get("l2app.scripts.wipe") is None
            assert registry.get("l2broken.tasks.anything") is None
        assert "l2app.scripts" not in sys.modules, "a kind never imports a module"
        assert ran.read_text() == "broken ran\n", "the failing tasks module ran once, at start"
        assert set(registry.failed) == {"l2broken"}
        assert "RuntimeError" in registry.failed["l2broken"]
    for name in [m for m in sys.modules if m.split(".")[0] in ("l2app", "l2broken")]:
        del sys.modules[name]
