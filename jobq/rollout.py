"""Roll one Deployment to a new pod template and wait until it has rolled: the Helm chart's pre-upgrade
hook that upgrades the schedulers before Helm touches the relays and the workers (``docs/deploy.md``,
"Upgrading": a newer worker or relay writes lifecycle-event entries an older scheduler would ship wrong).

It speaks to the Kubernetes API itself (in a pod: the service account's token and CA; the chart's hook
grants ``get`` and ``patch`` on the one Deployment), so the jobq image needs no kubectl:

1. ``GET`` the Deployment; none yet (a first install, or schedulers just enabled) → nothing to order.
2. A JSON patch replaces ``spec.template`` with the rendered one — exactly the template Helm applies right
   after, so Helm's own patch then changes nothing and starts no second rollout.
3. Poll until the rollout is complete as ``kubectl rollout status`` judges it: the new generation
   observed, every replica updated and available, no old replica left; a ``ProgressDeadlineExceeded``
   condition, or the time limit, fails it (the upgrade stops before the relays and workers change).
"""

from __future__ import annotations

import json
import os
import ssl
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["Api", "RolloutFailed", "in_cluster", "roll", "rolled"]

SERVICE_ACCOUNT = Path("/var/run/secrets/kubernetes.io/serviceaccount")


class RolloutFailed(Exception):
    """The Deployment did not roll (refused, stuck, or out of time): the upgrade must stop here."""


@dataclass(frozen=True)
class Api:
    """The Kubernetes API at ``base`` (``https://host:port``) with a bearer ``token``."""

    base: str
    token: str = ""
    context: ssl.SSLContext | None = None

    def call(
        self, method: str, path: str, body: Any = None, content_type: str = "application/json"
    ) -> tuple[int, dict[str, Any]]:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(self.base.rstrip("/") + path, data=data, method=method)
        request.add_header("Accept", "application/json")
        if data is not None:
            request.add_header("Content-Type", content_type)
        if self.token:
            request.add_header("Authorization", f"Bearer {self.token}")
        try:
            with urllib.request.urlopen(request, timeout=30, context=self.context) as answer:
                return answer.status, json.loads(answer.read() or b"{}")
        except urllib.error.HTTPError as refused:
            try:
                return refused.code, json.loads(refused.read() or b"{}")
            except ValueError:
                return refused.code, {}


def in_cluster() -> tuple[Api, str]:
    """The API as a pod sees it, and the pod's namespace."""
    host, port = os.environ["KUBERNETES_SERVICE_HOST"], os.environ.get("KUBERNETES_SERVICE_PORT", "443")
    context = ssl.create_default_context(cafile=str(SERVICE_ACCOUNT / "ca.crt"))
    token = (SERVICE_ACCOUNT / "token").read_text().strip()
    namespace = (SERVICE_ACCOUNT / "namespace").read_text().strip()
    return Api(f"https://{host}:{port}", token, context), namespace


def rolled(deployment: Mapping[str, Any], generation: int) -> bool:
    """Whether the rollout of ``generation`` is complete (``kubectl rollout status``'s judgement)."""
    status = deployment.get("status") or {}
    for condition in status.get("conditions") or []:
        if condition.get("type") == "Progressing" and condition.get("reason") == "ProgressDeadlineExceeded":
            name = deployment.get("metadata", {}).get("name")
            raise RolloutFailed(
                f"deployment {name} exceeded its progress deadline: {condition.get('message')}"
            )
    wanted = int((deployment.get("spec") or {}).get("replicas", 1))
    return (
        int(status.get("observedGeneration", 0)) >= generation
        and int(status.get("updatedReplicas", 0)) >= wanted
        and int(status.get("replicas", 0)) <= int(status.get("updatedReplicas", 0))
        and int(status.get("availableReplicas", 0)) >= int(status.get("updatedReplicas", 0))
    )


def roll(
    api: Api,
    namespace: str,
    manifest: Mapping[str, Any],
    timeout_s: float,
    *,
    poll_s: float = 2.0,
    say: Callable[[str], None] = print,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> bool:
    """Roll the Deployment ``manifest`` names to its pod template and wait; False when there is no such
    Deployment yet (nothing to order). Raises :class:`RolloutFailed`."""
    name = manifest["metadata"]["name"]
    path = f"/apis/apps/v1/namespaces/{namespace}/deployments/{name}"
    status, _live = api.call("GET", path)
    if status == 404:
        say(f"deployment {name} does not exist yet: nothing to roll first")
        return False
    if status != 200:
        raise RolloutFailed(f"cannot read deployment {name}: HTTP {status}")
    patch = [{"op": "replace", "path": "/spec/template", "value": manifest["spec"]["template"]}]
    status, patched = api.call("PATCH", path, patch, "application/json-patch+json")
    if status != 200:
        raise RolloutFailed(f"cannot patch deployment {name}: HTTP {status} {patched.get('message', '')}")
    generation = int(patched.get("metadata", {}).get("generation", 0))
    say(f"deployment {name}: rolling generation {generation}")
    deadline = clock() + timeout_s
    while True:
        status, live = api.call("GET", path)
        if status == 200 and rolled(live, generation):
            say(f"deployment {name}: rolled out")
            return True
        if clock() >= deadline:
            got = live.get("status", {}) if status == 200 else {"http": status}
            raise RolloutFailed(f"deployment {name} did not roll out within {timeout_s:g} s: {got}")
        sleep(poll_s)
