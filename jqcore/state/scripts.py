"""Loading the Lua transitions: each file of ``lua/`` with ``_lib.lua`` spliced in after its shebang."""

from __future__ import annotations

from functools import cache
from importlib import resources

__all__ = ["SCRIPT_NAMES", "source"]

SCRIPT_NAMES = (
    "enqueue_batch",
    "claim",
    "extend",
    "complete",
    "fail",
    "snooze",
    "hand_back",
    "release",
    "cancel",
    "promote_due",
    "reap_expired",
    "gc",
    "dead_retry",
    "dead_purge",
    "forget",
    "configure_queue",
    "configure_kind",
)


def _read(name: str) -> str:
    return resources.files("jqcore.state").joinpath("lua", f"{name}.lua").read_text(encoding="utf-8")


@cache
def source(name: str) -> str:
    """The script text sent to Redis: shebang line, the shared helpers, then the transition body."""
    text = _read(name)
    shebang, _, body = text.partition("\n")
    if not shebang.startswith("#!lua"):
        raise ValueError(f"{name}.lua must start with a '#!lua' shebang line")
    return f"{shebang}\n{_read('_lib')}\n{body}"
