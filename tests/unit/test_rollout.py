"""``jobq rollout`` (the Helm chart's schedulers-first hook) against a fake Kubernetes API on loopback: it
replaces the Deployment's pod template exactly, waits as ``kubectl rollout status`` does, does nothing
when there is no Deployment yet, and fails (stopping the upgrade) when the rollout is stuck."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from jobq.rollout import Api, RolloutFailed, roll, rolled

PATH = "/apis/apps/v1/namespaces/jobs/deployments/jobq-scheduler"
TEMPLATE = {
    "metadata": {"labels": {"app": "s"}},
    "spec": {"containers": [{"name": "scheduler", "image": "jobq:2"}]},
}
MANIFEST = {"metadata": {"name": "jobq-scheduler"}, "spec": {"replicas": 2, "template": TEMPLATE}}


class FakeApi:
    """One Deployment (or none); after the patch, each GET shows the rollout one step further."""

    def __init__(self, exists: bool = True, steps: list[dict[str, Any]] | None = None) -> None:
        self.exists = exists
        self.generation = 3
        self.status: dict[str, Any] = {
            "observedGeneration": 3,
            "replicas": 2,
            "updatedReplicas": 2,
            "availableReplicas": 2,
        }
        self.steps = (
            steps
            if steps is not None
            else [
                {"observedGeneration": 4, "replicas": 3, "updatedReplicas": 1, "availableReplicas": 2},
                {"observedGeneration": 4, "replicas": 3, "updatedReplicas": 2, "availableReplicas": 2},
                {"observedGeneration": 4, "replicas": 2, "updatedReplicas": 2, "availableReplicas": 2},
            ]
        )
        self.patches: list[tuple[str, Any]] = []
        self.tokens: set[str] = set()

    def deployment(self) -> dict[str, Any]:
        return {
            "metadata": {"name": "jobq-scheduler", "generation": self.generation},
            "spec": {"replicas": 2},
            "status": self.status,
        }


@pytest.fixture
def api() -> Iterator[tuple[FakeApi, Api]]:
    fake = FakeApi()

    class Handler(BaseHTTPRequestHandler):
        def _answer(self, code: int, body: dict[str, Any]) -> None:
            data = json.dumps(body).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            fake.tokens.add(self.headers.get("Authorization", ""))
            if self.path != PATH or not fake.exists:
                return self._answer(404, {"kind": "Status", "code": 404})
            if fake.generation == 4 and fake.steps:
                fake.status = fake.steps.pop(0)
            return self._answer(200, fake.deployment())

        def do_PATCH(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            fake.patches.append((self.headers["Content-Type"], body))
            fake.generation = 4
            return self._answer(200, fake.deployment())

        def log_message(self, *args: Any) -> None:
            return None

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield fake, Api(f"http://127.0.0.1:{server.server_address[1]}", token="sa-token")
    finally:
        server.shutdown()
        server.server_close()


def test_it_replaces_the_template_and_waits_for_every_replica(api: tuple[FakeApi, Api]) -> None:
    fake, client = api
    said: list[str] = []
    assert roll(client, "jobs", MANIFEST, 30, poll_s=0, say=said.append)
    assert fake.patches == [
        ("application/json-patch+json", [{"op": "replace", "path": "/spec/template", "value": TEMPLATE}])
    ]
    assert not fake.steps, "it waited until the old replica was gone"
    assert fake.tokens == {"Bearer sa-token"}
    assert said == [
        "deployment jobq-scheduler: rolling generation 4",
        "deployment jobq-scheduler: rolled out",
    ]


def test_no_deployment_yet_is_nothing_to_order(api: tuple[FakeApi, Api]) -> None:
    fake, client = api
    fake.exists = False
    assert not roll(client, "jobs", MANIFEST, 30, poll_s=0, say=lambda _: None)
    assert fake.patches == []


def test_a_stuck_rollout_fails_in_time(api: tuple[FakeApi, Api]) -> None:
    fake, client = api
    fake.steps = [
        {"observedGeneration": 4, "replicas": 3, "updatedReplicas": 1, "availableReplicas": 2}
    ] * 1000
    now = [0.0]

    def sleep(s: float) -> None:
        now[0] += 10

    with pytest.raises(RolloutFailed, match="did not roll out within 30 s"):
        roll(client, "jobs", MANIFEST, 30, poll_s=1, say=lambda _: None, clock=lambda: now[0], sleep=sleep)


def test_a_progress_deadline_fails_at_once() -> None:
    stuck = {
        "metadata": {"name": "jobq-scheduler"},
        "spec": {"replicas": 2},
        "status": {
            "conditions": [{"type": "Progressing", "reason": "ProgressDeadlineExceeded", "message": "x"}]
        },
    }
    with pytest.raises(RolloutFailed, match="progress deadline"):
        rolled(stuck, 4)
    assert rolled({"spec": {"replicas": 0}, "status": {"observedGeneration": 4}}, 4)
