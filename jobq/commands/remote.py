"""What the everyday commands share (``jobq enqueue``, ``job``, ``queue``, ``dead``, ``apply``, ``export``):
they go **through the gateway with a token**, so a token's policy and the audit trail apply to them exactly
as to any HTTP client (``docs/security.md``, "One policy, one door").

* The gateway and the token: ``JOBQ_URL`` (one gateway, or several comma-separated) and ``JOBQ_TOKEN`` —
  or ``JOBQ_TOKEN_FILE``, a file holding it (a mounted Secret) — as ``jobq.Client.from_env`` reads them;
  ``jobq stack env`` exports both for the local stack.
* Errors are one line on stderr, ``error (<code>): <message>``: the gateway's own code and message for a
  refusal (a token refused says so, with the HTTP status), and exit status 2.
* Exit statuses: 0 done; 1 the thing asked about is not as hoped (a job that ended errored, canceled or
  expired; a plan with changes under ``--dry-run``; a confirmation answered no); 2 an error (refused,
  unreachable, invalid input; a destructive action without ``--yes`` and without a terminal);
  3 a ``--timeout`` passed before the job ended.
* Destructive actions on many objects ask first, naming the count (:func:`confirm`); ``--yes`` skips the
  question, and without a terminal it is required.
* Durations are ``30s``, ``5m``, ``2h``, ``1d`` (also ``500ms``): :func:`parse_duration`.
"""

from __future__ import annotations

import asyncio
import os
import re
import sys
from collections.abc import Awaitable, Callable, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, NoReturn, TypeVar

import orjson
import typer

from jqcore.errors import JobqError
from jqruntime.client import ApiRefused, GatewayUnavailable, JobqClient

__all__ = [
    "EXIT_ERROR",
    "EXIT_NOT_OK",
    "EXIT_TIMEOUT",
    "confirm",
    "duration_ms",
    "fail",
    "format_duration",
    "gateway",
    "parse_duration",
    "parse_ref",
    "print_json",
    "run",
    "when",
]

T = TypeVar("T")

EXIT_NOT_OK, EXIT_ERROR, EXIT_TIMEOUT = 1, 2, 3
CLI_ATTEMPTS, CLI_DEADLINE_S = 3, 30.0
"""A command tries each gateway for at most 3 rounds and 30 s (an application's client: 5 and 60 s)."""

_DURATION = re.compile(r"(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)")
_UNIT_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}


def fail(code: str, message: str, status: int = EXIT_ERROR) -> NoReturn:
    """One line on stderr, ``error (<code>): <message>``, and the exit status."""
    typer.echo(f"error ({code}): {message}", err=True)
    raise typer.Exit(status)


def _token(env: Mapping[str, str]) -> str:
    token, path = env.get("JOBQ_TOKEN", ""), env.get("JOBQ_TOKEN_FILE", "")
    if token and path:
        fail("client_unconfigured", "JOBQ_TOKEN and JOBQ_TOKEN_FILE are both set: give the token once")
    if path:
        try:
            token = Path(path).expanduser().read_text(encoding="utf-8").strip()
        except (OSError, UnicodeDecodeError) as exc:
            fail("client_unconfigured", f"JOBQ_TOKEN_FILE: cannot read {path} ({type(exc).__name__})")
        if not token:
            fail("client_unconfigured", f"JOBQ_TOKEN_FILE: {path} is empty")
    return token


def gateway(env: Mapping[str, str] | None = None) -> JobqClient:
    """A client of the gateways ``JOBQ_URL`` names, with ``JOBQ_TOKEN`` (or ``JOBQ_TOKEN_FILE``)."""
    env = os.environ if env is None else env
    urls = [u.strip() for u in env.get("JOBQ_URL", "").split(",") if u.strip()]
    token = _token(env)
    if not urls or not token:
        fail(
            "client_unconfigured",
            "set JOBQ_URL (the gateway, e.g. http://127.0.0.1:28080) and JOBQ_TOKEN (or JOBQ_TOKEN_FILE);"
            ' `eval "$(jobq stack env)"` sets both for the local stack',
        )
    return JobqClient(
        urls, token, az=env.get("JOBQ_AZ", ""), attempts=CLI_ATTEMPTS, deadline_s=CLI_DEADLINE_S
    )


def refusal(exc: ApiRefused) -> str:
    """A gateway's refusal as one line: its message, what was refused (the token, for 401/403) and the
    HTTP status."""
    message = " ".join(exc.message.split())
    if exc.status in (401, 403):
        return f"the gateway refused the token (HTTP {exc.status}): {message}"
    return f"{message} (HTTP {exc.status})"


def run(action: Callable[[JobqClient], Awaitable[T]]) -> T:
    """``action(client)`` on a client of the gateway (:func:`gateway`), closed afterwards; a refusal, an
    unreachable gateway or any jobq error becomes one line and exit status 2."""
    client = gateway()

    async def go() -> T:
        async with client:
            return await action(client)

    try:
        return asyncio.run(go())
    except ApiRefused as exc:
        fail(exc.code, refusal(exc))
    except GatewayUnavailable as exc:
        fail("gateway_unavailable", " ".join(str(exc).split()))
    except JobqError as exc:
        fail(exc.code, " ".join(exc.message.split()))


def _interactive() -> bool:
    return sys.stdin.isatty()


def confirm(question: str, *, yes: bool, count: int) -> None:
    """Ask ``question`` (naming the count) before a destructive action on ``count`` objects. ``--yes``
    skips it; without a terminal it is refused (exit 2, nothing done); a "no" ends the command (exit 1)."""
    if yes or count == 0:
        return
    if not _interactive():
        fail(
            "confirmation_required",
            f"{question} — no terminal to ask on: pass --yes to do it ({count} affected)",
        )
    if not typer.confirm(question, default=False, err=True):
        typer.echo("nothing done", err=True)
        raise typer.Exit(EXIT_NOT_OK)


def duration_ms(text: str) -> int:
    """``500ms``, ``30s``, ``5m``, ``2h``, ``1d`` (or ``1.5h``) in milliseconds; ValueError otherwise."""
    m = _DURATION.fullmatch(text.strip().lower())
    if m is None:
        raise ValueError(f"{text!r}: a number and a unit, e.g. 30s, 5m, 2h, 1d")
    return round(float(m.group(1)) * _UNIT_MS[m.group(2)])


def parse_duration(text: str, option: str = "duration") -> int:
    """:func:`duration_ms` for an option (a bad one is a usage error naming it)."""
    try:
        return duration_ms(text)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint=option) from None


def format_duration(ms: int) -> str:
    """``ms`` in its largest whole unit: 86400000 → ``1d``, 90000 → ``90s``, 1500 → ``1500ms``."""
    if ms == 0:
        return "0s"
    for unit in ("d", "h", "m", "s"):
        if ms % _UNIT_MS[unit] == 0:
            return f"{ms // _UNIT_MS[unit]}{unit}"
    return f"{ms}ms"


def parse_ref(ref: str) -> tuple[str, str]:
    """A job's ref, ``<queue>/<id>`` (a handle's ``ref``), as (queue, id)."""
    queue, slash, job_id = ref.partition("/")
    if not slash or not queue or not job_id:
        raise typer.BadParameter(f"a job is named <queue>/<id>, not {ref!r}", param_hint="REF")
    return queue, job_id


def when(ms: int | None) -> str:
    """A time as the tables show it (UTC); ``-`` when unset."""
    if not ms:
        return "-"
    return datetime.fromtimestamp(ms / 1000, tz=UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def print_json(value: Any) -> None:
    """One JSON document on stdout, for scripts."""
    typer.echo(orjson.dumps(value, option=orjson.OPT_SORT_KEYS).decode())
