"""The FastAPI example (examples/fastapi) on the real path: its endpoints through httpx against the app
(lifespan run: the ``jobq.AsyncClient`` its endpoints' ``spec.aenqueue`` uses), the gateway and relay in
this process, its handlers run by a pool in this process (the
registry ``jobq worker --app examples.fastapi.jobs:registry`` serves; a worker process would spend seconds
starting here, which tests/e2e/test_django.py spends once for its management command)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import httpx
import pytest

import jobq
from examples.fastapi.app import create_app
from examples.fastapi.jobs import registry
from worker.pool import Pool, PoolConfig

Eventually = Callable[..., Awaitable[Any]]


@pytest.fixture
async def api(path: Any, token: str) -> AsyncIterator[httpx.AsyncClient]:
    """The example app for this test's queue, its lifespan (the app's JobqClient) running."""
    app = create_app(lambda: jobq.AsyncClient.connect(path.client.gateways[0].url, token), queue=path.queue)
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://example") as http,
    ):
        yield http


@pytest.fixture
async def example_worker(path: Any) -> AsyncIterator[None]:
    """A pool running the example's handlers on this test's queue."""
    async with Pool(registry, path.engine, PoolConfig([path.queue]), redis=path.redis):
        yield


@pytest.mark.usefixtures("example_worker")
async def test_enqueue_read_and_a_graph_through_the_example_app(
    api: httpx.AsyncClient, eventually: Eventually, path: Any
) -> None:
    enqueued = await api.post("/word-count", json={"text": "the quick brown fox"})
    assert enqueued.status_code == 202, enqueued.text
    ref = enqueued.json()["ref"]
    assert ref.startswith(f"{path.queue}/"), "a job is named by its ref: <queue>/<id>"

    async def job() -> dict[str, Any]:
        answer = await api.get(f"/jobs/{ref}")
        return {"status": answer.status_code, **answer.json()}

    done = await eventually(job, lambda j: j.get("state") == "completed", timeout_s=30)
    assert done["result"] == 4

    started = await api.post("/reports", json={"texts": ["a b", "c d e", "f"]})
    assert started.status_code == 202, started.text
    report_ref = started.json()["ref"]

    async def report() -> dict[str, Any]:
        answer = await api.get(f"/reports/{report_ref}")
        return {"status": answer.status_code, **answer.json()}

    finished = await eventually(report, lambda r: r.get("state") not in (None, "running"), timeout_s=30)
    assert finished["state"] == "completed", finished
    assert finished["total"] == {"texts": 3, "words": 6}


async def test_bad_input_and_unknown_ids_are_4xx(api: httpx.AsyncClient) -> None:
    assert (await api.post("/word-count", json={"text": 3})).status_code == 422
    assert (await api.post("/reports", json={"texts": []})).status_code == 422
    missing = await api.get("/jobs/default/0123456789abcdef0123456789")
    assert missing.status_code == 404
    assert missing.json()["detail"]["code"] == "job_not_found"
    assert (await api.get("/jobs/no-slash")).status_code == 404
    assert (await api.get("/reports/no-such-report")).status_code == 404
