"""Django settings for the example: ``DJANGO_SETTINGS_MODULE=examples.djangoapp.settings``.

The gateway and token come from ``JOBQ_GATEWAY`` and ``JOBQ_TOKEN``, the jobq queue of Django's
``default`` queue from ``JOBQ_DJANGO_QUEUE`` (default ``default``)."""

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
            "gateways": [os.environ.get("JOBQ_GATEWAY", "http://127.0.0.1:28080")],
            "token": os.environ.get("JOBQ_TOKEN", "dev-token"),
            "queues": {
                "default": os.environ.get("JOBQ_DJANGO_QUEUE", "default"),
                "urgent": os.environ.get("JOBQ_DJANGO_QUEUE", "default") + ".urgent",
            },
        },
    }
}
