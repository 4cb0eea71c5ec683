"""``python -m worker`` runs a pool from the ``JOBQ_WORKER_*`` settings alone (see docs/settings.md), like
``python -m kafkagate``; ``jobq worker`` is the same with command-line options.

A missing or malformed setting stops it with exit code 2 and one line naming the variable, no traceback
(:func:`jqruntime.lifecycle.service_main`).
"""

from jqcore.settings.common import load
from jqruntime.lifecycle import service_main
from worker.main import run
from worker.settings import WorkerSettings

service_main(lambda: run(load(WorkerSettings)))
