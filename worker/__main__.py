"""``python -m worker`` runs a pool from the ``JOBQ_WORKER_*`` settings alone (see docs/settings.md), like
``python -m kafkagate``; ``jobq worker`` is the same with command-line options.

A missing or malformed setting stops it with exit code 2 and one line naming the variable, no traceback.
"""

import sys

from jqcore.errors import JobqError
from jqcore.log import configure
from jqcore.settings import LogSettings, load
from worker.main import run
from worker.settings import WorkerSettings


def main() -> None:
    try:
        configure(load(LogSettings))  # a bad JOBQ_LOG_* is one readable line too
        run(load(WorkerSettings))
    except JobqError as exc:
        print(f"error ({exc.code}): {exc.message}", file=sys.stderr)
        sys.exit(2)


main()
