"""The example's HTTP API: enqueue a job, read it back, start a small graph and read its outcome.

- ``POST /word-count`` ``{"text": ...}`` → 202 ``{"id": ...}`` (once Kafka has the job)
- ``GET /jobs/{id}`` → ``{"state", "result", "error"}``, 404 when jobq has no such job (yet)
- ``POST /reports`` ``{"texts": [...]}`` → 202 ``{"id": ...}``: a graph counting each text's words in
  parallel, then totalling them (:func:`jqcore.graphs.fan_out` with a callback)
- ``GET /reports/{id}`` → ``{"state", "total"}``

One :class:`~jqruntime.client.JobqClient` per application, opened and closed by the lifespan.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import orjson
from fastapi import FastAPI, HTTPException, Request
from pydantic import BaseModel, Field

from examples.fastapi.jobs import QUEUE, count_words, total
from jqcore.graphs import Step, fan_out
from jqruntime.client import JobqClient

__all__ = ["app", "create_app"]


class WordCount(BaseModel):
    text: str = Field(max_length=100_000)


class Report(BaseModel):
    texts: list[str] = Field(min_length=1, max_length=100)


class Accepted(BaseModel):
    id: str


class JobView(BaseModel):
    state: str
    result: Any = None
    error: str | None = None


class ReportView(BaseModel):
    state: str
    total: dict[str, int] | None = None


def _client(request: Request) -> JobqClient:
    client: JobqClient = request.app.state.jobq
    return client


def create_app(gateways: list[str], token: str, queue: str = QUEUE) -> FastAPI:
    """The application, enqueueing on ``queue`` (the worker's ``JOBQ_EXAMPLE_QUEUE``)."""

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        async with JobqClient(gateways, token) as client:
            app.state.jobq = client
            yield

    app = FastAPI(title="jobq FastAPI example", lifespan=lifespan)

    @app.post("/word-count", status_code=202)
    async def enqueue_word_count(body: WordCount, request: Request) -> Accepted:
        (job_id,) = await _client(request).enqueue(queue, [count_words.message(body.text)])
        return Accepted(id=job_id)

    @app.get("/jobs/{job_id}")
    async def read_job(job_id: str, request: Request) -> JobView:
        job = await _client(request).get_job(queue, job_id)
        if job is None:
            raise HTTPException(404, {"code": "job_not_found", "message": f"no job {job_id!r} (yet)"})
        result = job.get("result")
        return JobView(
            state=job["state"],
            result=_json(result) if job["state"] == "completed" else None,
            error=job.get("last_error"),
        )

    @app.post("/reports", status_code=202)
    async def start_report(body: Report, request: Request) -> Accepted:
        graph_id = f"report-{uuid.uuid4().hex}"
        graph = fan_out(graph_id, count_words.kind, body.texts, queue=queue, callback=Step(total.kind))
        accepted = await _client(request).submit_graph(graph)
        return Accepted(id=accepted["id"])

    @app.get("/reports/{graph_id}")
    async def read_report(graph_id: str, request: Request) -> ReportView:
        graph = await _client(request).get_graph(graph_id)
        if graph is None:
            raise HTTPException(404, {"code": "report_not_found", "message": f"no report {graph_id!r} (yet)"})
        done = {n["name"]: n.get("result") for n in graph["nodes"] if n["state"] == "completed"}
        callback = done.get("callback")
        return ReportView(state=graph["state"], total=_json(callback) if callback is not None else None)

    return app


def _json(value: Any) -> Any:
    """A job's result as the gateway answers it: JSON text (a graph node's is already decoded)."""
    return orjson.loads(value) if isinstance(value, str | bytes) else value


app = create_app(
    [os.environ.get("JOBQ_GATEWAY", "http://127.0.0.1:28080")], os.environ.get("JOBQ_TOKEN", "dev-token")
)
