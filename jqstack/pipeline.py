"""One pipeline's processes, said once: the environment and the command line of every role.

The demo (``jobq demo``), the benchmarks and the fault suite run the path as separate processes on a stack:
gateways (``python -m kafkagate``), relays (``jqrelay``), schedulers (``jqsched``), worker pools (``jobq
worker``), push dispatchers (``jqdispatch``), the canary, the dashboard (``jqweb``) and the history job
(``jobq history run``). A :class:`PipelineEnv` holds what they share — how to reach the servers, the names the
pipeline owns (:class:`Scope`), the gateway token, logging and any other settings — and gives each role its
environment (on a secure stack each role its own credentials: ``servers`` is then a function of the role, the
stack's :meth:`~jqstack.manager.Stack.client_env`);
:func:`service_argv`, :func:`worker_argv` and :func:`history_argv` give their command lines.

It lives in ``jqstack`` because both the CLI (the demo) and ``loadtest`` (benchmarks, faults) use it, and
``loadtest`` sits below ``jobq``. It knows the settings only by their environment names (``JOBQ_*``,
``docs/settings.md``), so it imports nothing above ``jqstack``.

Worker pools import their handlers (``--app``) from the checkout (``examples/``, ``loadtest/``), which is
not installed: a worker's environment has the checkout first on ``PYTHONPATH`` (:func:`checkout_env`).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

from jqstack.paths import repo_root
from jqstack.supervise import python_m

__all__ = [
    "LOCAL_DOWNSTREAMS",
    "MODULES",
    "PipelineEnv",
    "Role",
    "Scope",
    "Service",
    "checkout_env",
    "history_argv",
    "service_argv",
    "worker_argv",
]

Service = Literal["gateway", "relay", "scheduler", "dispatcher", "canary", "web"]
MODULES: dict[Service, str] = {
    "gateway": "kafkagate",
    "relay": "jqrelay",
    "scheduler": "jqsched",
    "dispatcher": "jqdispatch",
    "canary": "canary",
    "web": "jqweb",
}
"""The module each service runs as (``python -m <module>``)."""

Role = Literal["gateway", "relay", "scheduler", "worker", "canary", "web", "history", "admin"]
"""Whose credentials a process uses on a secure stack (``jqstack.secure.ROLES``); ``admin``: one-off
commands and the pipeline's own reads (:meth:`PipelineEnv.common`)."""

SERVER_SETTINGS = (
    *("JOBQ_KAFKA_", "JOBQ_REDIS_", "JOBQ_CONSUL_", "KAFKA_BOOTSTRAP_SERVERS", "REDIS_URL"),
    *("CONSUL_HTTP_", "CONSUL_CACERT", "CONSUL_CLIENT_"),
)
"""How a process reaches the servers (jqcore's ``KafkaSettings``, ``RedisSettings``, ``ConsulSettings`` and
Consul's own names). With per-role settings none of them is inherited: a shell that ran ``eval "$(jobq
stack env ...)"`` for another role or stack would mix its user, password file or address in."""
KEPT = (
    *("JOBQ_KAFKA_REPLICATION", "JOBQ_KAFKA_CREATE_TOPICS"),
    *("JOBQ_REDIS_ALLOW_EVICTION", "JOBQ_REDIS_SOCKET_TIMEOUT_S"),
)
"""Inherited all the same: what the deployment wants, not how it connects."""
LOCAL_SPARK = {"SPARK_SUBMIT_OPTS": "-XX:TieredStopAtLevel=1"}
"""The Spark driver of a history run on this machine (the demo's, a drill's) compiles with C1 only: a
small workload beside a dozen processes on a few cores, where the optimising compiler's threads cost more
CPU than they win back (tests/spark's queries: -32 % CPU, 154 → 104 s). A deployment's history keeps the
JVM's default."""

LOCAL_DOWNSTREAMS = "127.0.0.0/8"
"""What a local stack's dispatcher may POST to beyond public addresses (``JOBQ_DISPATCHER_ALLOW_NETS``):
the demo's downstream listens on loopback, which a dispatcher refuses by default."""


def checkout_env(**extra: str) -> dict[str, str]:
    """This process's environment, ``extra`` on top, with the checkout's root first on ``PYTHONPATH``: for a
    child process that imports ``loadtest`` or ``examples`` (neither is installed)."""
    return _on_checkout({**os.environ, **extra})


def _on_checkout(env: dict[str, str]) -> dict[str, str]:
    path = os.pathsep.join(p for p in (str(repo_root()), env.get("PYTHONPATH")) if p)
    return {**env, "PYTHONPATH": path}


def service_argv(service: Service) -> list[str]:
    """``python -m <module>`` of ``service``."""
    return python_m(MODULES[service])


def worker_argv(
    queues: str,
    *,
    app: str,
    concurrency: int,
    processes: int | None = None,
    grace_s: float | None = None,
    burst: bool = False,
) -> list[str]:
    """``jobq worker`` serving ``queues`` with the handlers of ``app`` (``module:attribute``)."""
    argv = python_m("jobq", "worker", "--app", app, "--queues", queues, "--concurrency", str(concurrency))
    if processes is not None:
        argv += ["--processes", str(processes)]
    if grace_s is not None:
        argv += ["--grace", f"{grace_s:g}"]
    return [*argv, "--burst"] if burst else argv


def history_argv() -> list[str]:
    """``jobq history run``: the history job (PySpark) reading the events topic into Parquet."""
    return python_m("jobq", "history", "run")


@dataclass(frozen=True)
class Scope:
    """The names a pipeline owns, so that pipelines sharing a stack never see each other's work: queue and
    topic ``<kind>.<tag>`` (its events, schedule and cron beside them), the relays' Consul keys and consumer
    groups, the scheduler group. Without a scope a pipeline uses the settings' default names (the demo)."""

    kind: str
    """What runs it: ``bench``, ``faults``."""
    tag: str

    @property
    def name(self) -> str:
        """The queue and the topic: ``<kind>.<tag>``."""
        return f"{self.kind}.{self.tag}"

    def settings(self) -> dict[str, str]:
        topic = self.name
        return {
            "JOBQ_DEFAULT_TOPIC": topic,
            "JOBQ_RELAY_TOPICS": topic,
            "JOBQ_RELAY_KV_PREFIX": f"jobq-{self.kind}/{self.tag}",
            "JOBQ_RELAY_GROUP_PREFIX": f"{self.kind}-{self.tag}",
            "JOBQ_SCHEDULER_GROUP": f"{self.kind}-{self.tag}",
            "JOBQ_SCHEDULER_QUEUES": self.name,
            "JOBQ_EVENTS_TOPIC": f"{topic}.events",
            "JOBQ_FAR_TOPIC": f"{topic}.schedule",
            "JOBQ_CRON_KV_PREFIX": f"jobq-{self.kind}/{self.tag}/cron",
        }


@dataclass(frozen=True)
class PipelineEnv:
    """The settings every process of one pipeline shares, and each role's environment on top of them
    (this process's environment underneath, as a child inherits it)."""

    servers: Mapping[str, str] | Callable[[Role], Mapping[str, str]]
    """How the processes reach the servers: one mapping for every role (``Endpoints.exports()``, or the
    part a pipeline needs: a worker pool only Redis, ``{"JOBQ_REDIS_URL": url}``), or each role's own
    settings (``Stack.client_env``: on a secure stack a Kafka, Redis and Consul user per role); then no
    server setting is inherited from this process's environment (:data:`SERVER_SETTINGS`)."""
    scope: Scope | None = None
    token: str | None = None
    """The gateways' bearer token (``JOBQ_GATE_TOKENS``), which the canary sends too."""
    log_level: str | None = None
    log_format: str | None = None
    settings: Mapping[str, str] = field(default_factory=dict)
    """Any other settings every process gets (``JOBQ_*``), over the scope's names."""

    def common(self) -> dict[str, str]:
        """What every process gets (with the ``admin`` role's servers); also the environment of a one-off
        command (``jobq rebuild``)."""
        return self._env("admin")

    def _env(self, role: Role) -> dict[str, str]:
        if isinstance(self.servers, Mapping):
            env = {**os.environ, **self.servers}
        else:
            inherited = {
                k: v for k, v in os.environ.items() if k in KEPT or not k.startswith(SERVER_SETTINGS)
            }
            env = {**inherited, **self.servers(role)}
        if self.scope is not None:
            env.update(self.scope.settings())
        if self.token is not None:
            env["JOBQ_GATE_TOKENS"] = self.token
        if self.log_level is not None:
            env["JOBQ_LOG_LEVEL"] = self.log_level
        if self.log_format is not None:
            env["JOBQ_LOG_FORMAT"] = self.log_format
        return {**env, **self.settings}

    def gateway(self, port: int, *, az: str | None = None, processes: int | None = None) -> dict[str, str]:
        env = {**self._env("gateway"), "JOBQ_GATE_PORT": str(port)}
        if az is not None:
            env["JOBQ_GATE_AZ"] = az
        if processes is not None:
            env["JOBQ_GATE_PROCESSES"] = str(processes)
        return env

    def relay(self, holder: str | None = None) -> dict[str, str]:
        """``holder``: the name it holds its topics' locks by (default: the relay's own)."""
        env = self._env("relay")
        if holder is not None:
            env["JOBQ_RELAY_HOLDER"] = holder
        return env

    def scheduler(self, name: str, *, queues: str | None = None) -> dict[str, str]:
        env = {**self._env("scheduler"), "JOBQ_SCHEDULER_NAME": name}
        if queues is not None:
            env["JOBQ_SCHEDULER_QUEUES"] = queues
        return env

    def worker(self) -> dict[str, str]:
        """With the checkout first on ``PYTHONPATH``: the handlers of the demo, the benchmarks and the fault
        suite live there."""
        return _on_checkout(self._env("worker"))

    def dispatcher(self, queues: str, *, callback_url: str) -> dict[str, str]:
        """A push dispatcher (the worker's credentials: it does what a pool does to jobs in Redis); the
        callback secret (``JOBQ_CALLBACK_SECRET``) is one of the pipeline's ``settings``, the gateways'.
        The local stack's downstreams (the demo's ``examples.dispatch_hook``) listen on 127.0.0.1, an
        address the dispatcher refuses unless allowed: ``JOBQ_DISPATCHER_ALLOW_NETS`` allows loopback."""
        return {
            **self._env("worker"),
            "JOBQ_DISPATCHER_QUEUES": queues,
            "JOBQ_DISPATCHER_CALLBACK_URL": callback_url,
            "JOBQ_DISPATCHER_ALLOW_NETS": LOCAL_DOWNSTREAMS,
        }

    def canary(self, gateways: Sequence[str], *, interval_s: float, late_after_s: float) -> dict[str, str]:
        """``gateways``: ``url@az`` each."""
        env = {
            **self._env("canary"),
            "JOBQ_CANARY_GATEWAYS": ",".join(gateways),
            "JOBQ_CANARY_INTERVAL_S": f"{interval_s:g}",
            "JOBQ_CANARY_LATE_AFTER_S": f"{late_after_s:g}",
        }
        if self.token is not None:
            env["JOBQ_CANARY_TOKEN"] = self.token
        return env

    def web(self, port: int) -> dict[str, str]:
        return {**self._env("web"), "JOBQ_WEB_PORT": str(port)}

    def history(self, *, trigger_s: float) -> dict[str, str]:
        return {**self._env("history"), "JOBQ_HISTORY_TRIGGER_S": f"{trigger_s:g}", **LOCAL_SPARK}
