"""The dispatcher as operators and the demo run it: ``python -m jqdispatch`` configured by the environment
alone, POSTing to the demo's downstream (``python -m examples.dispatch_hook``), which answers at once or
202 and calls back through the gateway; SIGTERM stops the dispatcher with exit 0."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

from jobq.demo_workload import HOOK_KIND
from jqstack.manager import Endpoints
from jqstack.procs import free_port
from jqstack.supervise import Children, python_m, tcp_open
from tests.conftest import Eventually
from tests.dispatch.conftest import LOOPBACK, SECRET, Pipeline


async def test_dispatcher_process_with_the_demo_downstream(
    pipeline: Pipeline, endpoints: Endpoints, prefix: str, tmp_path: Path, eventually: Eventually
) -> None:
    kind, port = f"{prefix}.{HOOK_KIND}", free_port()
    status, body = await pipeline.call(
        "PUT",
        f"/v1/kinds/{kind}",
        json={"queues": [pipeline.queue], "dispatch": {"url": f"http://127.0.0.1:{port}/hook"}},
    )
    assert status == 200, body
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(Path.cwd()), os.environ.get("PYTHONPATH")])),
        "JOBQ_REDIS_URL": endpoints.redis_url or "",
        "JOBQ_CALLBACK_SECRET": SECRET,
        "JOBQ_DISPATCHER_QUEUES": pipeline.queue,
        "JOBQ_DISPATCHER_CALLBACK_URL": pipeline.gate_url,
        "JOBQ_DISPATCHER_ALLOW_NETS": LOOPBACK,
        "JOBQ_LOG_FORMAT": "json",
    }
    with Children(grace_s=10) as children:
        hook = children.start(  # both start at once: the interpreter's start-up is most of this test
            "hook",
            python_m("examples.dispatch_hook", "--port", str(port)),
            env=env,
            output=tmp_path / "hook.log",
        )
        dispatcher = children.start(
            "dispatcher", python_m("jqdispatch"), env=env, output=tmp_path / "dispatcher.log"
        )
        await hook.wait_ready_async(tcp_open("127.0.0.1", port), timeout_s=30)
        ids = [
            (await pipeline.client.enqueue_one(pipeline.queue, kind, {"mode": mode}))["id"]
            for mode in ("now", "later")
        ]

        async def states() -> list[str | None]:
            return [
                (j.state if j else None) for j in await pipeline.engine.reads.get_jobs(pipeline.queue, ids)
            ]

        await eventually(states, lambda s: s == ["completed", "completed"], 30)
        results = [
            json.loads(j.result or "null")
            for j in await pipeline.engine.reads.get_jobs(pipeline.queue, ids)
            if j
        ]
        assert results == [{"handled": ids[0], "attempt": 1}, {"handled": ids[1], "later": True}]
        dispatcher.signal(signal.SIGTERM)
        assert await dispatcher.exited(15) == 0
    log = (tmp_path / "dispatcher.log").read_text()
    assert '"dispatched"' in log
    assert SECRET not in log
    assert "HTTP 200" in (tmp_path / "hook.log").read_text()  # the callback was accepted
