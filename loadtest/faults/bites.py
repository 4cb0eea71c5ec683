"""Proof that a scenario's fault took effect: a fault that silently did nothing must fail its scenario,
not pass it.

A fault function records **evidence** as it goes (:meth:`loadtest.faults.run.Drill.evidence`): each piece
names what should have happened and whether it was seen — the killed process is gone and another pid took
its name, the proxy refused connections while its link was cut and the cut processes logged errors, the
ballast's last write failed with "no space", the partition's leader moved, the skewed process's clock was
off by its skew. :func:`fault_took_effect` turns the evidence into the ``fault-took-effect`` check: it
fails when any piece was not seen, **or when there is none** (a fault that proved nothing).
"""

from __future__ import annotations

import errno
import re
import socket
import time
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any

import orjson

from jqstack.supervise import alive
from loadtest.faults.invariants import Check

__all__ = [
    "SKEW_SLACK_S",
    "SLOWED_MS",
    "errors_logged",
    "fault_took_effect",
    "killed",
    "moved",
    "no_space",
    "refused",
    "replaced",
    "roundtrip_ms",
    "severed",
    "skew_seen_s",
    "skewed",
    "slowed",
]

SLOWED_MS = 150.0
"""A round trip through a link slowed by 100 ms each way takes at least this (200 ms, less slack)."""
SKEW_SLACK_S = 30.0
"""How far from its skew a skewed process's clock may be seen (log stamps against the file's real mtime)."""

_TEXT_LINE = re.compile(r"^(\d{4}-\d\d-\d\dT\S+Z) \[(\w+)")
_JSON_LINE = re.compile(r'"level": "(\w+)".*"timestamp": "([^"]+)"')
_RDKAFKA_LINE = re.compile(r"^%(\d)\|(\d+\.\d+)\|")
"""librdkafka's own log lines on stderr: ``%<syslog level>|<epoch s>|<facility>|...`` (3 error, 4 warning)."""
PROBLEMS = frozenset({"warning", "error", "critical", "exception"})


def fault_took_effect(evidence: Sequence[Mapping[str, Any]]) -> Check:
    """``pass`` when every piece of evidence was seen; ``fail`` when one was not or none was recorded.
    The offenders are the pieces' ``what`` (the detail says why)."""
    if not evidence:
        return Check(
            "fault-took-effect", "fail", 0, 1, ("no evidence",), {"why": "the fault recorded no evidence"}
        )
    missed = [e for e in evidence if not e["ok"]]
    detail = {str(e["what"]): {k: v for k, v in e.items() if k not in ("what", "ok")} for e in evidence}
    return Check(
        "fault-took-effect",
        "fail" if missed else "pass",
        len(evidence),
        len(missed),
        tuple(str(e["what"]) for e in missed),
        detail,
    )


def killed(pid: int | None) -> bool:
    """The process ``pid`` is gone."""
    return pid is not None and not alive(pid)


def replaced(old: int | None, new: int | None) -> bool:
    """The process ``old`` is gone and another (``new``) took its name."""
    return killed(old) and new is not None and new != old


def moved(before: str, after: str) -> bool:
    """A role (a partition's leader, a slot's master) went from ``before`` to another live holder."""
    return after not in (before, "", "kafka--1")


def no_space(err: int | None) -> bool:
    """The write that ended the ballast failed because the disk was full."""
    return err == errno.ENOSPC


def slowed(took_ms: float) -> bool:
    return took_ms >= SLOWED_MS


def skewed(seen_s: float | None, skew_s: float) -> bool:
    """The process's clock was seen ``skew_s`` off (within ``SKEW_SLACK_S``)."""
    return seen_s is not None and abs(seen_s - skew_s) < SKEW_SLACK_S


def refused(port: int, timeout_s: float = 2.0) -> bool:
    """Whether a connection to ``127.0.0.1:port`` fails (a cut proxy no longer listens)."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout_s):
            return False
    except OSError:
        return True


def severed(proxy_log: str, name: str, start: float, end: float) -> int:
    """Live connections of proxy ``name`` that toxiproxy broke within ``[start, end]`` (epoch s, whole
    seconds in its log): a cut that met clients using the link, whether or not they retried silently."""
    n = 0
    for line in proxy_log.splitlines():
        try:
            entry = orjson.loads(line)
        except orjson.JSONDecodeError:
            continue
        if entry.get("name") != name or entry.get("level") != "warn" or "bytes" not in entry:
            continue
        if int(start) <= _stamp(str(entry.get("time", ""))) <= end:
            n += 1
    return n


def roundtrip_ms(port: int, request: bytes = b"PING\r\n", timeout_s: float = 5.0) -> float:
    """Milliseconds from sending ``request`` through ``127.0.0.1:port`` to the first byte of the answer
    (a Redis ``PING`` by default; the connection is opened first, so only the exchange is timed)."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout_s) as s:
        started = time.monotonic()
        s.sendall(request)
        s.recv(64)
        return (time.monotonic() - started) * 1000


def _stamp(text: str) -> float:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def errors_logged(logs: Iterable[str], start: float, end: float) -> int:
    """Lines at warning level or above stamped within ``[start, end]`` (epoch s) in the logs' text (the
    services' console or JSON format): what the processes behind a cut link saw."""
    n = 0
    for text in logs:
        for line in text.splitlines():
            if m := _TEXT_LINE.match(line):
                problem, at = m[2].lower() in PROBLEMS, _stamp(m[1])
            elif j := _JSON_LINE.search(line):
                problem, at = j[1].lower() in PROBLEMS, _stamp(j[2])
            elif k := _RDKAFKA_LINE.match(line):
                problem, at = int(k[1]) <= 4, float(k[2])
            else:
                continue
            if problem and start <= at <= end:
                n += 1
    return n


def skew_seen_s(log: str, written_at: float) -> float | None:
    """How far the clock of the process that wrote ``log`` was from the real one: its last line's own
    stamp minus ``written_at`` (the real time of that last write: the file's mtime, which libfaketime
    leaves alone with ``NO_FAKE_STAT``). None when the log has no stamped line."""
    stamps = [m[1] for line in log.splitlines() if (m := _TEXT_LINE.match(line))]
    stamps += [j[2] for line in log.splitlines() if (j := _JSON_LINE.search(line))]
    return round(_stamp(stamps[-1]) - written_at, 1) if stamps else None
