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
