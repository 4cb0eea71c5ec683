"""Logging writes to the stderr of the moment, so a stream closed after set-up never breaks a caller."""

from __future__ import annotations

import io
import sys

import pytest

from jqcore.log import configure, get_logger


def test_log_lines_follow_stderr_after_the_setup_stream_closed(monkeypatch: pytest.MonkeyPatch) -> None:
    first = io.StringIO()
    monkeypatch.setattr(sys, "stderr", first)
    configure()
    first.close()  # what a test runner does with its capture stream
    second = io.StringIO()
    monkeypatch.setattr(sys, "stderr", second)
    get_logger("t").warning("still written", n=1)
    assert "still written" in second.getvalue()
