"""A FastAPI application that enqueues jobq jobs and reads their results (docs/integrations.md).

Run it from a checkout (examples are not installed), beside ``jobq dev``, which runs the handlers::

    jobq dev --app examples.fastapi.jobs:registry        # the local stack, a worker on the example's queue
    eval "$(jobq stack env)"                              # JOBQ_URL and JOBQ_TOKEN (jobq-dev-token)
    uvicorn examples.fastapi.app:app
"""
