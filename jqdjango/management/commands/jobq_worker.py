"""``manage.py jobq_worker``: a jobq worker pool running this project's Django tasks (``jqdjango`` in
``INSTALLED_APPS``). The queues default to the jobq queues of the backend's ``QUEUES``; every other
setting is the worker's own (``JOBQ_WORKER_*``, ``JOBQ_REDIS_URL``: docs/settings.md)."""

from __future__ import annotations

from argparse import ArgumentParser
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from jqcore.errors import ConfigError
from jqcore.log import configure
from jqcore.settings.common import load
from jqcore.settings.observe import LogSettings
from jqdjango.backend import JobqBackend
from jqdjango.compat import task_backends
from worker.main import run
from worker.settings import WorkerSettings


class Command(BaseCommand):  # type: ignore[misc]  # Django is untyped here
    help = "Run a jobq worker pool for the Django tasks of a jobq task backend."

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument("--backend", default="default", help="The TASKS alias (default: default).")
        parser.add_argument("--queues", help="jobq queues, comma-separated (default: the backend's QUEUES).")
        parser.add_argument("--concurrency", type=int, help="Tasks run at once (JOBQ_WORKER_CONCURRENCY).")
        parser.add_argument("--burst", action="store_true", help="Exit once the queues hold nothing to do.")

    def handle(self, *args: Any, **options: Any) -> None:
        backend = task_backends[options["backend"]]
        if not isinstance(backend, JobqBackend):
            raise CommandError(f"TASKS[{options['backend']!r}] is not jqdjango.backend.JobqBackend")
        queues = options["queues"] or ",".join(
            sorted({backend.settings.jobq_queue(q) for q in backend.queues})
        )
        if not queues:
            raise CommandError(f"TASKS[{options['backend']!r}] lists no QUEUES: give --queues")
        given: dict[str, Any] = {"app": "jqdjango.worker", "queues": queues}
        if options["concurrency"] is not None:
            given["concurrency"] = options["concurrency"]
        if options["burst"]:
            given["burst"] = True
        try:
            configure(load(LogSettings))
            run(load(WorkerSettings, **given))
        except ConfigError as exc:
            raise CommandError(str(exc)) from None
