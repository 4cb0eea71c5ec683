"""The example's HTTP API on jobq's front door: enqueue a job, read it back by its ref, start a small graph
and read its outcome.

- ``POST /word-count`` ``{"text": ...}`` → 202 ``{"ref": "<queue>/<id>"}`` (once Kafka has the job)
- ``GET /jobs/{ref}`` → ``{"state", "result", "error"}``; 404 when jobq has no such job (yet: the relay
  writes it to Redis a few milliseconds after the 202)
- ``POST /reports`` ``{"texts": [...]}`` → 202 ``{"ref": ...}``: a graph counting each text's words in
  parallel, then totalling them (:func:`jobq.fan_out` with a callback); the ref is the callback's job
- ``GET /reports/{ref}`` → ``{"state", "total"}``: ``running`` until the callback's job ends

One :class:`jobq.AsyncClient` per application, opened in the lifespan (``JOBQ_URL``, ``JOBQ_TOKEN``: what
``jobq dev`` prints and ``eval "$(jobq stack env)"`` exports) and closed with it; the endpoints enqueue with
``await spec.aenqueue(...)``, which uses that client, and name every job by its handle's ``ref``.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI, HTTPException, Request
from pydantic import BaseModel, Field

import jobq
from examples.fastapi.jobs import QUEUE, count_words, total

__all__ = ["app", "create_app"]

ENDED = ("errored", "canceled", "expired", "deleted")
"""The states a job ends in without a result."""


class WordCount(BaseModel):
    text: str = Field(max_length=100_000)


class Report(BaseModel):
    texts: list[str] = Field(min_length=1, max_length=100)


class Accepted(BaseModel):
    ref: str


class JobView(BaseModel):
    state: str
    result: Any = None
    error: str | None = None


class ReportView(BaseModel):
    state: str
    total: dict[str, int] | None = None


def create_app(
    connect: Callable[[], jobq.AsyncClient] = jobq.AsyncClient.from_env, queue: str = QUEUE
) -> FastAPI:
    """The application: its jobq client made by ``connect`` when it starts, its jobs on ``queue`` (the
    worker's ``JOBQ_EXAMPLE_QUEUE``)."""

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        async with connect() as client:  # spec.aenqueue(...) in the endpoints uses it
            app.state.jobq = client
            yield

    app = FastAPI(title="jobq FastAPI example", lifespan=lifespan)

    def handle(request: Request, ref: str, result_type: Any) -> jobq.AsyncJobHandle[Any]:
        client: jobq.AsyncClient = request.app.state.jobq
        try:
            return client.job(ref, result_type)
        except ValueError:
            raise HTTPException(404, {"code": "job_not_found", "message": f"no job {ref!r}"}) from None

    @app.post("/word-count", status_code=202)
    async def enqueue_word_count(body: WordCount) -> Accepted:
        job = await count_words.options(queue=queue).aenqueue(body.text)
        return Accepted(ref=job.ref)  # 202 once Kafka has the job

    @app.get("/jobs/{ref:path}")
    async def read_job(ref: str, request: Request) -> JobView:
        job = handle(request, ref, int)
        info = await job.info()
        if info["state"] == "unknown":
            raise HTTPException(404, {"code": "job_not_found", "message": f"no job {ref!r} (yet)"})
        result = await job.result() if info["state"] == "completed" else None
        return JobView(state=info["state"], result=result, error=info.get("last_error"))

    @app.post("/reports", status_code=202)
    async def start_report(body: Report, request: Request) -> Accepted:
        graph = jobq.fan_out(
            f"report-{uuid.uuid4().hex}",
            count_words.kind,
            body.texts,
            queue=queue,
            callback=jobq.Step(total.kind),
        )
        accepted = await request.app.state.jobq.submit_graph(graph)
        return Accepted(ref=f"{accepted['queue']}/{accepted['nodes']['callback']}")

    @app.get("/reports/{ref:path}")
    async def read_report(ref: str, request: Request) -> ReportView:
        callback = handle(request, ref, dict[str, int])
        state = await callback.state()
        if state == "completed":
            return ReportView(state=state, total=await callback.result())
        # the callback's job exists once every count finished (a failed count skips it: `jobq graph show`)
        return ReportView(state=state if state in ENDED else "running")

    return app


app = create_app()
"""``uvicorn examples.fastapi.app:app``: its client from ``JOBQ_URL`` and ``JOBQ_TOKEN``."""
