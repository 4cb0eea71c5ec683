"""Obtaining the servers: Kafka's jars (Maven), Consul (built from its Go module), Redis (Debian); and
promtool (built from Prometheus's Go module), which checks and unit-tests the alert rules.
(toxiproxy, the fault-injection tests' proxy, is built by :mod:`jqstack.testing.faultproxy`.)

Each ``ensure_*`` is idempotent and cached under ``JOBQ_HOME``: the second call fetches and builds
nothing. A failing step raises :class:`StackError` naming the tool, the command, its output tail and
what to do about it.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from jqstack.errors import StackError
from jqstack.paths import (
    CONSUL_VERSION,
    KAFKA_VERSION,
    PROMTOOL_VERSION,
    SPARK_VERSION,
    deploy_dir,
    home,
)
from jqstack.procs import run_step

__all__ = [
    "ensure_consul",
    "ensure_kafka_jars",
    "ensure_promtool",
    "ensure_redis",
    "ensure_spark_jars",
    "require_tool",
]


def require_tool(name: str, hint: str) -> str:
    path = shutil.which(name)
    if path is None:
        raise StackError(f"`{name}` is not on PATH. {hint}")
    return path


def _mvn_copy(pom: Path, out: Path, what: str, note: str) -> Path:
    marker = out / ".complete"
    if marker.exists():
        return out
    require_tool("mvn", "Install Maven and a JDK 17+: apt-get install -y maven openjdk-17-jre-headless")
    tmp = out.with_name(out.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    run_step(
        what,
        [
            "mvn",
            "-q",
            "-B",
            "-f",
            str(pom),
            "dependency:copy-dependencies",
            "-DincludeScope=runtime",
            f"-DoutputDirectory={tmp}",
        ],
        note=note,
        hint="Maven Central must be reachable; rerun once the network is back.",
    )
    shutil.rmtree(out, ignore_errors=True)
    tmp.rename(out)
    marker.touch()
    return out


def ensure_kafka_jars() -> Path:
    """The folder of jars that runs Apache Kafka's broker (``java -cp '<dir>/*' kafka.Kafka``)."""
    require_tool("java", "Install a JDK 17+: apt-get install -y openjdk-17-jre-headless")
    return _mvn_copy(
        deploy_dir() / "kafka" / "pom.xml",
        home() / f"kafka-{KAFKA_VERSION}" / "libs",
        f"fetching Kafka {KAFKA_VERSION}'s broker jars with Maven (~56 MB)",
        "first run only, ~1-2 min",
    )


def ensure_spark_jars() -> Path:
    """Spark's Kafka connector and its dependencies, matching pyspark exactly."""
    return _mvn_copy(
        deploy_dir() / "spark" / "pom.xml",
        home() / f"spark-kafka-{SPARK_VERSION}",
        f"fetching Spark {SPARK_VERSION}'s Kafka connector jars with Maven",
        "first run only, ~1 min",
    )


def ensure_consul() -> Path:
    """The Consul agent binary, built once from its Go module through the wrapper in ``deploy/consul``."""
    binary = home() / "bin" / f"consul-{CONSUL_VERSION}"
    if binary.exists():
        return binary
    require_tool("go", "Install Go >= 1.22 (the machine image ships one in /usr/local/go/bin).")
    binary.parent.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "GOFLAGS": "-mod=mod", "CGO_ENABLED": "0"}
    tmp = binary.with_name(binary.name + ".partial")
    run_step(
        f"building Consul {CONSUL_VERSION} from its Go module",
        ["go", "build", "-trimpath", "-o", str(tmp), "github.com/hashicorp/consul"],
        note="first run only, ~3-5 min",
        cwd=deploy_dir() / "consul",
        env=env,
        timeout_s=1800,
        hint="The Go module proxy must be reachable; deploy/consul/go.sum pins every module.",
    )
    tmp.rename(binary)
    return binary


def ensure_promtool() -> Path:
    """Prometheus's ``promtool``, built once from its Go module through the wrapper in
    ``deploy/promtool`` with ``-mod=readonly``: the checked-in ``go.sum`` must pin every module (nothing is
    resolved anew at build time)."""
    binary = home() / "bin" / f"promtool-{PROMTOOL_VERSION}"
    if binary.exists():
        return binary
    require_tool("go", "Install Go >= 1.24 (the machine image ships one in /usr/local/go/bin).")
    module = "github.com/prometheus/prometheus"
    wrapper = deploy_dir() / "promtool"
    pin = f"{module} v{PROMTOOL_VERSION}"
    if not (wrapper / "go.mod").is_file() or pin not in (wrapper / "go.mod").read_text():
        raise StackError(f"{wrapper / 'go.mod'} must require {pin}: it pins the promtool jobq builds.")
    binary.parent.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "GOFLAGS": "-mod=readonly", "CGO_ENABLED": "0"}
    tmp = binary.with_name(binary.name + ".partial")
    run_step(
        f"building promtool (Prometheus module v{PROMTOOL_VERSION}) from its Go module",
        ["go", "build", "-mod=readonly", "-trimpath", "-o", str(tmp), f"{module}/cmd/promtool"],
        note="first run only, ~5-10 min on 2 cores",
        cwd=wrapper,
        env=env,
        timeout_s=2400,
        hint="The Go module proxy must be reachable; deploy/promtool/go.sum pins every module.",
    )
    tmp.rename(binary)
    return binary


def ensure_redis() -> Path:
    """Debian's redis-server (installed with apt when missing; the system service is never used)."""
    found = shutil.which("redis-server")
    if found:
        return Path(found)
    if os.geteuid() != 0:
        raise StackError("redis-server is missing; install it: sudo apt-get install -y redis-server")
    note = "first run only, ~1 min"
    run_step("updating the apt package lists", ["apt-get", "update", "-qq"], note=note, timeout_s=600)
    run_step(
        "installing redis-server (apt)",
        ["apt-get", "install", "-y", "-qq", "redis-server"],
        note=note,
        timeout_s=600,
        env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"},
    )
    # Debian starts the system service on install; jobq never uses it.
    if shutil.which("systemctl"):
        run_step("stopping the system redis", ["sh", "-c", "systemctl stop redis-server || true"])
    return Path(shutil.which("redis-server") or "/usr/bin/redis-server")
