"""``python -m <service>``'s wrapper: what can never work is one line and exit 2, a server not answering
yet one line and exit 1 (a supervisor restarts it), never a traceback."""

from __future__ import annotations

import pytest

from jqcore.errors import BackendUnavailable, ConfigError
from jqruntime.lifecycle import service_main


def _raise(exc: Exception) -> None:
    raise exc


@pytest.mark.parametrize(
    ("exc", "status", "line"),
    [
        (ConfigError("JOBQ_X must be set"), 2, "error (config_invalid): JOBQ_X must be set"),
        (BackendUnavailable("Redis unreachable"), 1, "error (backend_unavailable): Redis unreachable"),
    ],
)
def test_a_refusal_is_one_line_and_an_exit_status(
    exc: Exception, status: int, line: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as stopped:
        service_main(lambda: _raise(exc))
    assert stopped.value.code == status
    assert capsys.readouterr().err.strip().splitlines() == [line]
