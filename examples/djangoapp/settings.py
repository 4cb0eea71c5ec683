"""Django settings for the example: ``DJANGO_SETTINGS_MODULE=examples.djangoapp.settings``.

The gateways and token come from ``JOBQ_URL`` (one URL, or several comma-separated) and ``JOBQ_TOKEN`` —
what ``jobq dev`` prints and ``eval "$(jobq stack env)"`` exports; the local stack's by default — and the
jobq queue of Django's ``default`` queue from ``JOBQ_DJANGO_QUEUE`` (default ``default``)."""

from __future__ import annotations

import os
from typing import Any

SECRET_KEY = "example-only"
USE_TZ = True
DATABASES: dict[str, Any] = {}
INSTALLED_APPS = ["jqdjango", "examples.djangoapp"]  # manage.py jobq_worker

TASKS = {
    "default": {
        "BACKEND": "jqdjango.backend.JobqBackend",
        "QUEUES": ["default", "urgent"],
        "OPTIONS": {
            "gateways": os.environ.get("JOBQ_URL", "http://127.0.0.1:28080").split(","),
            "token": os.environ.get("JOBQ_TOKEN", "jobq-dev-token"),
            "queues": {
                "default": os.environ.get("JOBQ_DJANGO_QUEUE", "default"),
                "urgent": os.environ.get("JOBQ_DJANGO_QUEUE", "default") + ".urgent",
            },
        },
    }
}
