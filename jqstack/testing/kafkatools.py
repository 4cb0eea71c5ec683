"""Kafka's own administration commands for the fault suite (test tooling: not installed with jobq).

The Python client (librdkafka) has no partition reassignment, so the suite runs the one operators use:
``ReassignPartitionsCommand`` from Apache Kafka's ``kafka-tools`` jar, which ``deploy/kafka/pom.xml``
resolves beside the broker's jars (its own dependencies are the broker's: nothing else is fetched).
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from jqstack.errors import StackError
from jqstack.provision import ensure_kafka_jars

__all__ = ["reassign_partitions"]

REASSIGN = "org.apache.kafka.tools.reassign.ReassignPartitionsCommand"


def reassign_partitions(bootstrap: str, plan: Path, timeout_s: float = 120.0) -> str:
    """Start the reassignment ``plan`` (Kafka's JSON: ``{"version": 1, "partitions": [{"topic",
    "partition", "replicas"}]}``) on the (plaintext) cluster at ``bootstrap``; the command's output.
    Returns once Kafka accepted it: the copying goes on in the brokers (watch the replicas to see it end)."""
    libs = ensure_kafka_jars()
    argv = ["java", "-cp", f"{libs}/*", REASSIGN, "--bootstrap-server", bootstrap]
    done = subprocess.run(
        [*argv, "--reassignment-json-file", str(plan), "--execute"],
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
    )
    if done.returncode != 0:
        raise StackError(f"the partition reassignment failed (exit {done.returncode}): {done.stderr[-2000:]}")
    return done.stdout
