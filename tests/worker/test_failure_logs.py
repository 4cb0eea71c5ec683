"""A real worker process (``jobq worker``) logs a failing handler's traceback with the job's id, queue, kind
and attempt, and the handler's own log lines carry them: what a team reads in its log search."""

from __future__ import annotations

import os
import textwrap
from pathlib import Path
from typing import Any

import orjson

from jqcore.envelope import new_envelope
from jqengine import Engine
from jqstack.manager import Endpoints
from jqstack.supervise import Children, python_m

APP = """
    import logging

    import structlog
    from jobq import Registry

    registry = Registry()
    log = logging.getLogger("failapp")


    @registry.job("fail.charge", queue="{queue}")
    def charge(order: int) -> None:
        log.warning("charging order %d", order)
        structlog.get_logger("failapp").info("about to call the bank", order=order)
        raise RuntimeError(f"the bank said no to order {{order}}")
"""


def _lines(log: Path) -> list[dict[str, Any]]:
    return [orjson.loads(line) for line in log.read_text().splitlines() if line.startswith("{")]


async def test_a_failing_handlers_traceback_is_in_the_workers_log_with_the_jobs_fields(
    endpoints: Endpoints, engine: Engine, prefix: str, tmp_path: Path
) -> None:
    queue = f"{prefix}.fail"
    (tmp_path / "failapp.py").write_text(textwrap.dedent(APP.format(queue=queue)))
    env = new_envelope(queue, "fail.charge", {"order": 42}, max_attempts=1)
    await engine.enqueue_batch([env])
    path = os.pathsep.join(p for p in (str(tmp_path), os.environ.get("PYTHONPATH")) if p)
    settings = {"JOBQ_REDIS_URL": endpoints.redis_url or "", "JOBQ_LOG_FORMAT": "json", "PYTHONPATH": path}
    argv = python_m("jobq", "worker", "--app", "failapp:registry", "--queues", queue, "--burst")
    log = tmp_path / "worker.log"
    with Children(grace_s=10) as children:
        worker = children.start("worker", argv, output=log, env={**os.environ, **settings})
        assert await worker.exited(120) == 0, log.read_text()
    job = await engine.reads.get_job(queue, env.id)
    assert job is not None
    assert job.state == "errored"

    lines = _lines(log)
    fields = {"job_id": env.id, "queue": queue, "kind": "fail.charge", "attempt": 1}
    failed = [line for line in lines if line["event"] == "job attempt failed"]
    assert len(failed) == 1, lines
    line = failed[0]
    assert {k: line.get(k) for k in fields} == fields
    assert (line["level"], line["final"], line["component"]) == ("error", True, "worker")
    assert line["error"] == "RuntimeError: the bank said no to order 42"
    assert "Traceback (most recent call last)" in line["exception"]
    assert f'{tmp_path / "failapp.py"}", line' in line["exception"]  # the handler's own frame
    assert line["exception"].rstrip().endswith("RuntimeError: the bank said no to order 42")

    own = {line["event"]: line for line in lines if line.get("component") == "failapp" or "order" in line}
    for event in ("charging order 42", "about to call the bank"):  # stdlib logging and structlog
        assert {k: own[event].get(k) for k in fields} == fields, own
