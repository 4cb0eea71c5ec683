"""A FastAPI application that enqueues jobq jobs and reads their results (docs/integrations.md).

Run it from a checkout (examples are not installed)::

    JOBQ_GATEWAY=http://127.0.0.1:28080 JOBQ_TOKEN=dev-token uvicorn examples.fastapi.app:app
    PYTHONPATH=. jobq worker --app examples.fastapi.jobs:registry --queues default
"""
