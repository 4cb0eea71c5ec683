"""jqdjango's pure parts: reading an exception class from a recorded error, result ids, OPTIONS."""

from __future__ import annotations

import traceback

import pytest
from pydantic import ValidationError

from jqdjango.options import BackendOptions
from jqdjango.results import exception_path


class LocalError(Exception):
    pass


def _recorded(exc: BaseException) -> str:
    """What the worker records for a handler's exception (``worker.execute``)."""
    try:
        raise exc
    except BaseException as raised:
        return "".join(traceback.format_exception(raised, limit=20))


@pytest.mark.parametrize(
    ("error", "path"),
    [
        (_recorded(ValueError("boom: with a colon")), "builtins.ValueError"),
        (_recorded(KeyError("k")), "builtins.KeyError"),
        (_recorded(LocalError()), f"{__name__}.LocalError"),
        (_recorded(LocalError("multi\nline message: with a colon")), f"{__name__}.LocalError"),
        ("timeout after 30.0s", "builtins.TimeoutError"),
        ("Retry: smtp down", "jqcore.errors.Retry"),
        ("", "builtins.Exception"),
        ("no class here at all", "builtins.Exception"),
    ],
)
def test_the_exception_class_is_read_from_the_last_line(error: str, path: str) -> None:
    assert exception_path(error) == path


def test_chained_exceptions_name_the_last() -> None:
    try:
        try:
            raise KeyError("inner")
        except KeyError as inner:
            raise LocalError("outer") from inner
    except LocalError as exc:
        text = "".join(traceback.format_exception(exc))
    assert exception_path(text) == f"{__name__}.LocalError"


def test_queue_names_map_or_are_refused() -> None:
    options = BackendOptions(
        gateways=["http://gw:1"], token="t", queues={"emails": "mail"}, queue_prefix="app."
    )
    assert options.jobq_queue("emails") == "mail"
    assert options.jobq_queue("default") == "app.default"
    with pytest.raises(ValueError, match="Bad Name"):
        options.jobq_queue("Bad Name")
    assert [g.url for g in options.gateway_list()] == ["http://gw:1"]


@pytest.mark.parametrize(
    "options",
    [
        {"token": "t"},
        {"gateways": [], "token": "t"},
        {"gateways": ["http://gw:1"]},
        {"gateways": ["http://gw:1"], "token": "t", "priority_step_ms": -1},
        {"gateways": ["http://gw:1"], "token": "t", "unknown": 1},
    ],
)
def test_bad_options_are_refused(options: dict[str, object]) -> None:
    with pytest.raises(ValidationError):
        BackendOptions.model_validate(options)
