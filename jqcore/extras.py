"""What each optional part of jobq needs installed, and the one line said when it is not.

``pip install jobq`` gives the client (:mod:`jqruntime.client`) and the worker (:mod:`worker`); everything
else comes with an extra of ``pyproject.toml`` (README, "Install"). This module is the one place that knows
which extra brings which library: the service packages call :func:`require` when they are imported, and the
``jobq`` command turns a :class:`MissingExtra` (or a ``ModuleNotFoundError`` of a library listed here) into
``jobq gate needs the server extra: pip install 'jobq[server]'`` instead of a traceback.
"""

from __future__ import annotations

import functools
import importlib.util

from jqcore.errors import JobqError

__all__ = ["EXTRAS", "MissingExtra", "extra_for", "install_hint", "require"]

EXTRAS: dict[str, tuple[str, ...]] = {
    # the gateway, relay, scheduler, canary, recovery: Kafka, Consul, cron expressions, rate limits
    "server": ("confluent_kafka", "consul", "croniter", "aiolimiter"),
    "web": ("jinja2",),  # the dashboard's templates
    "history": ("duckdb",),  # the job history tables
    "tracing": ("opentelemetry.sdk", "opentelemetry.exporter.otlp.proto.http"),
    "tui": ("textual",),  # `jobq status --watch`
    "spark": ("pyspark",),
    "django": ("django",),  # jqdjango: Django's tasks on jobq
    "local": ("watchfiles",),  # `jobq dev`: the worker restarted when the application's files change
}
"""Each extra and the modules it installs (pyproject.toml's ``[project.optional-dependencies]``)."""


def install_hint(extra: str) -> str:
    return f"pip install 'jobq[{extra}]'"


class MissingExtra(JobqError, ImportError):
    """A part of jobq was used without the extra that installs its libraries."""

    code = "missing_extra"

    def __init__(self, what: str, extra: str) -> None:
        super().__init__(f"{what} needs the {extra} extra: {install_hint(extra)}")
        self.what, self.extra = what, extra


@functools.cache  # `jobq` asks of each command's extras at every start: 56 look-ups along sys.path, 5 modules
def _installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:  # a parent package is missing
        return False


def require(what: str, *extras: str) -> None:
    """Raise :class:`MissingExtra` (an ``ImportError`` too) naming the first of ``extras`` whose modules
    are not all installed; ``what``: the part that needs them (``"the gateway (kafkagate)"``)."""
    for extra in extras:
        if not all(_installed(m) for m in EXTRAS[extra]):
            raise MissingExtra(what, extra)


def extra_for(exc: ImportError) -> str | None:
    """The extra that installs the module ``exc`` could not import (None: not one of an extra's)."""
    if isinstance(exc, MissingExtra):
        return exc.extra
    name = exc.name or ""
    for extra, modules in EXTRAS.items():
        if any(name.split(".")[0] == module.split(".")[0] for module in modules):
            return extra
    return None
