"""A bare ``pip install jobq`` (no extras): a fresh virtualenv with the wheel and its runtime requirements
at the lock's pins holds none of the server's libraries, enqueues through a gateway and works the jobs.

The gateway and the relay run in this process (the full environment, on the session's stack); the client
and the worker run in the bare virtualenv, as processes that see neither this checkout nor this venv.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from jqcore.routing import Route, RoutingSettings
from jqrelay.main import RelayService
from jqstack.manager import Endpoints
from jqstack.supervise import Children
from jqstack.testing.wheel import build_wheel, fresh_venv
from kafkagate.main import GateService

pytestmark = pytest.mark.install

LEFT_OUT = {  # distribution: the module it would install
    "duckdb": "duckdb",
    "textual": "textual",
    "jinja2": "jinja2",
    "pyspark": "pyspark",
    "opentelemetry-sdk": "opentelemetry.sdk",
    "opentelemetry-api": "opentelemetry",
    "confluent-kafka": "confluent_kafka",
    "py-consul": "consul",
}
JOBS = 12


@pytest.fixture(scope="module")
def bare(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The bare virtualenv's ``bin`` directory."""
    work = tmp_path_factory.mktemp("slim")
    return fresh_venv(work, build_wheel(work)) / "bin"


def bare_env(app_dir: Path, **extra: str) -> dict[str, str]:
    """The environment of a process of the bare virtualenv: nothing of this checkout's or this venv's."""
    keep = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV", "JOBQ_"))}
    return {**keep, "PYTHONPATH": str(app_dir), **extra}


def run_all(cwd: Path, *argvs: list[str | Path]) -> list[tuple[int, str, str]]:
    """Each of ``argvs`` run at once in the bare virtualenv: (exit status, stdout, stderr) of each."""
    procs = [
        subprocess.Popen(
            [str(a) for a in argv],
            cwd=cwd,
            env=bare_env(cwd),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for argv in argvs
    ]
    outs = [p.communicate(timeout=90) for p in procs]
    return [(p.returncode, out, err) for p, (out, err) in zip(procs, outs, strict=True)]


PROBE = """
import importlib.metadata, importlib.util, json, sys
import jqruntime.client, worker, worker.main, jobq.cli  # the client, the worker, the command: no extra needed
dists = sorted(d.metadata["Name"].lower() for d in importlib.metadata.distributions())
found = [m for m in sys.argv[1:] if importlib.util.find_spec(m.split(".")[0]) is not None]
print(json.dumps({"dists": dists, "found": found, "jobq": jqruntime.client.__file__}))
"""


def test_a_bare_install_has_no_server_library_and_says_which_extra_a_command_needs(
    bare: Path, tmp_path: Path
) -> None:
    (probe,) = run_all(tmp_path, [bare / "python", "-c", PROBE, *LEFT_OUT.values()])  # compiles the .pyc
    gate, service, listing = run_all(
        tmp_path,
        [bare / "jobq", "gate", "--port", "1"],
        [bare / "python", "-m", "kafkagate"],
        [bare / "jobq", "--help"],
    )
    assert probe[0] == 0, probe[2]
    seen = json.loads(probe[1])
    assert "jobq" in seen["dists"]
    assert seen["jobq"].startswith(str(bare.parent)), "the bare venv's jobq ran, not this checkout's"
    assert not [d for d in LEFT_OUT if d in seen["dists"]], seen["dists"]
    assert seen["found"] == []
    for (code, out, err), command in ((gate, "jobq gate"), (service, "python -m kafkagate")):
        assert (code, out) == (2, ""), err
        assert err == f"error (missing_extra): {command} needs the server extra: pip install 'jobq[server]'\n"
    code, out, err = listing
    assert code == 0, err
    assert "worker" in out
    assert "(needs the server extra: pip install 'jobq[server]')" in out  # status, cron, ...: listed


APP = """
from jobq import Registry

registry = Registry()


@registry.job("slim.double", queue={queue!r})
async def double(n: int) -> int:
    return n * 2
"""

CLIENT = """
import asyncio, json, sys
from jqruntime.client import JobqClient
from tenacity import AsyncRetrying, retry_if_result, stop_after_delay, wait_fixed


def unfinished(jobs):
    return not all(j is not None and j["state"] == "completed" for j in jobs)


async def main(url: str, token: str, queue: str, n: int) -> None:
    async with JobqClient([url], token) as client:
        ids = await client.enqueue(queue, [{"kind": "slim.double", "args": {"n": i}} for i in range(n)])
        # the worker's results, read back through the gateway until all completed (60 s at most)
        until = AsyncRetrying(
            retry=retry_if_result(unfinished), stop=stop_after_delay(60), wait=wait_fixed(0.1),
            retry_error_callback=lambda state: state.outcome.result(),
        )
        async def read():
            return await asyncio.gather(*(client.get_job(queue, i) for i in ids))

        jobs = await until(read)
        print(json.dumps([[j["state"], j.get("result")] if j else None for j in jobs]))


asyncio.run(main(*sys.argv[1:4], int(sys.argv[4])))
"""


async def test_a_bare_install_enqueues_through_the_gateway_and_works_the_jobs(
    bare: Path,
    tmp_path: Path,
    prefix: str,
    endpoints: Endpoints,
    make_topic: Callable[..., str],
    make_gate: Callable[..., GateService],
    make_relay: Callable[..., RelayService],
    token: str,
) -> None:
    queue = f"{prefix}.slim"
    (tmp_path / "slimapp.py").write_text(APP.format(queue=queue))
    (tmp_path / "enqueue.py").write_text(CLIENT)
    topic = make_topic("jobs", partitions=2)
    routing = RoutingSettings(routes=[Route(queues=f"{prefix}*", topic=topic)], default_topic="")
    worker_env = bare_env(tmp_path, JOBQ_REDIS_URL=endpoints.redis_url or "")
    worker_argv = [str(bare / "jobq"), "worker", "--app", "slimapp:registry", "--queues", queue]
    with Children(grace_s=10) as children:
        pool = children.start(
            "worker", worker_argv, env=worker_env, output=tmp_path / "worker.log", cwd=tmp_path
        )
        async with make_gate(routing) as gate, make_relay(topic):
            client = await asyncio.create_subprocess_exec(
                str(bare / "python"), "enqueue.py", gate.url, token, queue, str(JOBS),
                cwd=tmp_path, env=bare_env(tmp_path),
                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
            )  # fmt: skip
            out, err = await asyncio.wait_for(client.communicate(), 120)
        assert client.returncode == 0, err.decode()
        assert pool.returncode is None, (tmp_path / "worker.log").read_text()[-3000:]
    assert json.loads(out) == [["completed", json.dumps(i * 2)] for i in range(JOBS)]
    log = (tmp_path / "worker.log").read_text()
    assert "Traceback" not in log, log[-3000:]
