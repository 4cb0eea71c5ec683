"""Obtaining the servers: Kafka's jars (Maven), Consul (built from its Go module), Redis (Debian); and
promtool (built from Prometheus's Go module), which checks and unit-tests the alert rules.
(toxiproxy, the fault-injection tests' proxy, is built by :mod:`jqstack.testing.faultproxy`.)

Each ``ensure_*`` is idempotent and cached under ``JOBQ_HOME``: the second call fetches and builds
nothing. A failing step raises :class:`StackError` naming the tool, the command, its output tail and
what to do about it.

Nothing is taken on trust (docs/supply-chain.md): Maven runs with strict checksums and the jars it
resolves must match ``deploy/<pom>/jars.sha256`` exactly (:func:`lock_jars` rewrites those lists); a Go
tool is built by :func:`build_go_tool` with ``-mod=readonly`` from a wrapper module whose ``go.sum`` pins
every module (nothing is resolved at build time, and a missing entry fails the build).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import tempfile
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
from jqstack.progress import step

__all__ = [
    "build_go_tool",
    "ensure_consul",
    "ensure_kafka_cds",
    "ensure_kafka_jars",
    "ensure_promtool",
    "ensure_redis",
    "ensure_spark_jars",
    "lock_jars",
    "require_tool",
]

JARS_LIST = "jars.sha256"
"""Beside each pom: ``<sha256>  <jar>`` for every jar it resolves (``sha256sum`` format, ``#`` comments)."""


def require_tool(name: str, hint: str) -> str:
    path = shutil.which(name)
    if path is None:
        raise StackError(f"`{name}` is not on PATH. {hint}")
    return path


def _mvn_copy(pom: Path, out: Path, what: str, note: str) -> Path:
    """``out``: the jars ``pom`` resolves, each matching its sha256 in the pom's ``jars.sha256``. The marker
    records the list it was checked against, so an edited list re-checks (and, on a mismatch, re-fetches)."""
    expected = read_jars_list(pom.parent / JARS_LIST)
    marker = out / ".complete"
    stamp = _digest(pom.parent / JARS_LIST)
    if marker.exists() and marker.read_text() == stamp:
        return out
    if out.is_dir() and not _jar_problems(out, expected):
        marker.write_text(stamp)
        return out
    require_tool("mvn", "Install Maven and a JDK 17+: apt-get install -y maven openjdk-17-jre-headless")
    tmp = out.with_name(out.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    _mvn_resolve(pom, tmp, what, note)
    problems = _jar_problems(tmp, expected)
    if problems:
        shutil.rmtree(tmp, ignore_errors=True)
        raise StackError(
            f"{what}: the jars Maven resolved do not match {pom.parent / JARS_LIST}:\n"
            + "\n".join(problems)
            + "\nA jar that differs from the recorded sha256 was tampered with (in ~/.m2 or on the way)"
            " or the pom changed: after an intended change rerun `./run lock jars` (docs/supply-chain.md)."
        )
    shutil.rmtree(out, ignore_errors=True)
    tmp.rename(out)
    marker.write_text(stamp)
    return out


def _mvn_resolve(pom: Path, out: Path, what: str, note: str, env: dict[str, str] | None = None) -> None:
    """``mvn dependency:copy-dependencies`` with strict checksums (``-C``): a download whose checksum
    differs from Maven Central's fails the step."""
    run_step(
        what,
        [
            "mvn",
            "-q",
            "-B",
            "--strict-checksums",
            "-f",
            str(pom),
            "dependency:copy-dependencies",
            "-DincludeScope=runtime",
            f"-DoutputDirectory={out}",
        ],
        note=note,
        env=env,
        hint="Maven Central must be reachable; rerun once the network is back. A checksum failure means a"
        " download did not match Maven Central's checksum: do not bypass it.",
    )


def read_jars_list(path: Path) -> dict[str, str]:
    """``jar name → sha256`` from a ``jars.sha256`` list."""
    if not path.is_file():
        raise StackError(
            f"{path} is missing: it pins the jars the pom resolves (`./run lock jars` writes it)."
        )
    out: dict[str, str] = {}
    for line in path.read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            digest, _, name = line.partition("  ")
            out[name.strip()] = digest.strip()
    return out


def _jar_problems(folder: Path, expected: dict[str, str]) -> list[str]:
    """One line per jar of ``folder`` that is missing, unexpected or differs from its recorded sha256."""
    found = {p.name: _digest(p) for p in folder.glob("*.jar")}
    problems = [f"  missing: {n}" for n in sorted(expected.keys() - found.keys())]
    problems += [f"  not in the list: {n}" for n in sorted(found.keys() - expected.keys())]
    problems += [
        f"  {n}: sha256 {found[n]}, recorded {expected[n]}"
        for n in sorted(found.keys() & expected.keys())
        if found[n] != expected[n]
    ]
    return problems


def _digest(path: Path) -> str:
    with path.open("rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def lock_jars() -> list[Path]:
    """Rewrite ``deploy/kafka/jars.sha256`` and ``deploy/spark/jars.sha256`` from what Maven resolves into a
    fresh, temporary local repository (every jar and plugin downloaded again and checked against Maven
    Central's checksums, so nothing already cached in ``~/.m2`` is trusted). Run by ``./run lock jars``."""
    require_tool("mvn", "Install Maven and a JDK 17+: apt-get install -y maven openjdk-17-jre-headless")
    written = []
    with tempfile.TemporaryDirectory(prefix="jobq-lock-jars-") as tmp:
        env = {**os.environ, "MAVEN_OPTS": f"{os.environ.get('MAVEN_OPTS', '')} -Dmaven.repo.local={tmp}/m2"}
        for name in ("kafka", "spark"):
            pom = deploy_dir() / name / "pom.xml"
            out = Path(tmp) / name
            _mvn_resolve(pom, out, f"resolving {pom} with Maven (a fresh local repository)", "~1-2 min", env)
            lines = [f"{_digest(jar)}  {jar.name}" for jar in sorted(out.glob("*.jar"))]
            target = pom.parent / JARS_LIST
            target.write_text(
                f"# The jars deploy/{name}/pom.xml resolves, each with its sha256.\n"
                "# Written by `./run lock jars` (each download checked against Maven Central);\n"
                "# jqstack.provision refuses any jar that is not listed here.\n" + "\n".join(lines) + "\n"
            )
            written.append(target)
    return written


def ensure_kafka_jars() -> Path:
    """The folder of jars that runs Apache Kafka's broker (``java -cp '<dir>/*' kafka.Kafka``)."""
    require_tool("java", "Install a JDK 17+: apt-get install -y openjdk-17-jre-headless")
    return _mvn_copy(
        deploy_dir() / "kafka" / "pom.xml",
        home() / f"kafka-{KAFKA_VERSION}" / "libs",
        f"fetching Kafka {KAFKA_VERSION}'s broker jars with Maven (~56 MB)",
        "first run only, ~1-2 min",
    )


def ensure_kafka_cds(libs: Path) -> Path | None:
    """Kafka's class-data-sharing archive for this JVM and these jars (AppCDS; ``KafkaBroker`` and the
    storage format map it: :func:`jqstack.servers.jvm_cds`), made once per Kafka version, jar list and JDK
    build under ``JOBQ_HOME/kafka-<version>/``: a throwaway broker runs until its metadata answers and
    dumps the classes it loaded when it stops (``-XX:ArchiveClassesAtExit``, ~10 s once). None when it
    cannot be made (the brokers then start without it, as before)."""
    java = shutil.which("java")
    if java is None:
        return None
    archive = libs.parent / f"cds-{_cds_key(Path(java), libs)}.jsa"
    if archive.is_file():
        return archive
    for old in libs.parent.glob("cds-*.jsa"):  # another JDK build's or jar list's: never valid again
        old.unlink(missing_ok=True)
    from jqstack.servers import dump_kafka_cds  # a broker run: servers and the supervisor

    with step("making Kafka's class-data-sharing archive (faster broker starts)", "once per Kafka and JDK"):
        made = dump_kafka_cds(libs, archive)
    return archive if made else None


def _cds_key(java: Path, libs: Path) -> str:
    """What an archive is valid for: the JVM build (its ``libjvm.so``, found without starting a JVM) and
    the jar list Maven's copy was checked against (``.complete``)."""
    real = java.resolve()
    parts = [str(real)]
    for jvm in (real.parent.parent / "lib" / "server" / "libjvm.so",):
        with contextlib.suppress(OSError):
            st = jvm.stat()
            parts += [str(st.st_size), str(st.st_mtime_ns)]
    with contextlib.suppress(OSError):
        parts.append((libs / ".complete").read_text())
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:12]


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
    return build_go_tool(
        "consul",
        CONSUL_VERSION,
        "github.com/hashicorp/consul",
        note="first run only, ~3-5 min",
        timeout_s=1800,
    )


def build_go_tool(
    tool: str,
    version: str,
    module: str,
    package: str = "",
    *,
    ldflags: str = "",
    wrapper_dir: str = "",
    note: str = "first run only",
    timeout_s: float = 900,
) -> Path:
    """``JOBQ_HOME/bin/<tool>-<version>``: ``module``'s package ``package`` (default: the module itself)
    built once with ``go build -mod=readonly`` from the wrapper module ``deploy/<tool>`` (or
    ``deploy/<wrapper_dir>``), whose ``go.mod``
    must require ``module`` at ``version`` and whose checked-in ``go.sum`` pins every module the build
    needs. Readonly: nothing is resolved or added at build time; a module missing from ``go.sum`` (or a
    ``go.mod`` that needs an update) fails the build, and a download that differs from its ``go.sum``
    entry fails it too. ``GOTOOLCHAIN=local``: never a downloaded Go. The Go build and module caches are
    the user's (``go env GOCACHE GOMODCACHE``), kept between builds."""
    binary = home() / "bin" / f"{tool}-{version}"
    if binary.exists():
        return binary
    wrapper = deploy_dir() / (wrapper_dir or tool)
    pin = f"{module} v{version}"
    if not (wrapper / "go.mod").is_file() or pin not in (wrapper / "go.mod").read_text():
        raise StackError(f"{wrapper / 'go.mod'} must require {pin}: it pins the {tool} jobq builds.")
    if not (wrapper / "go.sum").is_file():
        raise StackError(
            f"{wrapper / 'go.sum'} is missing: it pins every module {tool} needs (see docs/supply-chain.md)."
        )
    require_tool("go", "Install Go >= 1.23 (the machine image ships one in /usr/local/go/bin).")
    binary.parent.mkdir(parents=True, exist_ok=True)
    flags = [f for f in os.environ.get("GOFLAGS", "").split() if not f.startswith("-mod=")]
    env = {
        **os.environ,
        "GOFLAGS": " ".join([*flags, "-mod=readonly"]),
        "GOTOOLCHAIN": "local",
        "GOWORK": "off",
        "CGO_ENABLED": "0",
    }
    tmp = binary.with_name(binary.name + ".partial")
    nice = ["nice", "-n", "19"] if shutil.which("nice") else []  # a big build leaves the cores to the rest
    cmd = [*nice, "go", "build", "-mod=readonly", "-trimpath", *(["-ldflags", ldflags] if ldflags else [])]
    run_step(
        f"building {tool} {version} from its Go module",
        [*cmd, "-o", str(tmp), package or module],
        note=note,
        cwd=wrapper,
        env=env,
        timeout_s=timeout_s,
        hint=f"The Go module proxy must be reachable. {wrapper}/go.sum pins every module: a 'missing go.sum"
        " entry' or 'updates to go.mod needed' means the wrapper no longer matches it, a 'checksum mismatch'"
        " that a download differs from it (never bypass that); docs/supply-chain.md says how to regenerate.",
    )
    tmp.rename(binary)
    return binary


def ensure_promtool() -> Path:
    """Prometheus's ``promtool`` (checks and unit-tests ``deploy/prometheus/alerts.yml``), built once from
    its Go module through the wrapper in ``deploy/promtool`` (:func:`build_go_tool`)."""
    return build_go_tool(
        "promtool",
        PROMTOOL_VERSION,
        "github.com/prometheus/prometheus",
        "github.com/prometheus/prometheus/cmd/promtool",
        note="first run only, ~5-10 min on 2 cores",
        timeout_s=2400,
    )


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
