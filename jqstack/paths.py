"""Where the local stack keeps what it fetched, built and ran.

``JOBQ_HOME`` (default ``~/.cache/jobq``) holds the caches shared by every stack (Kafka jars, the Consul
binary) and one folder per named stack (``stacks/<name>``) with its data, logs and ``state.json``.
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = [
    "CONSUL_VERSION",
    "KAFKA_VERSION",
    "PROMTOOL_VERSION",
    "SPARK_VERSION",
    "TOXIPROXY_VERSION",
    "deploy_dir",
    "home",
    "repo_root",
    "stack_dir",
]

KAFKA_VERSION = "4.2.0"
CONSUL_VERSION = "1.20.2"
TOXIPROXY_VERSION = "2.12.0"
SPARK_VERSION = "4.2.0"
PROMTOOL_VERSION = "0.316.0"
"""The Go module version of ``github.com/prometheus/prometheus`` (deploy/promtool/go.mod) promtool is
built from (the module's v0.316.x is Prometheus 3.16's source)."""


def home() -> Path:
    """The root of jobq's caches and stacks."""
    return Path(os.environ.get("JOBQ_HOME", Path.home() / ".cache" / "jobq")).expanduser()


def stack_dir(name: str) -> Path:
    return home() / "stacks" / name


def repo_root() -> Path:
    """The checkout this package runs from (``deploy/`` lives beside the packages)."""
    return Path(__file__).resolve().parents[1]


def deploy_dir() -> Path:
    override = os.environ.get("JOBQ_DEPLOY_DIR")
    return Path(override) if override else repo_root() / "deploy"
