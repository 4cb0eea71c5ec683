"""The errors of the recovery tools: domain errors (:class:`jqcore.errors.JobqError`); the CLI turns them
into its own messages, the gateway and the dashboard into HTTP answers."""

from __future__ import annotations

from jqcore.errors import JobqError

__all__ = ["RebuildError", "ReplayError"]


class ReplayError(JobqError):
    """A replay cannot go on: a bad position, a missing topic or partition, a stalled read, a job that is
    not finished. ``option`` names the command-line option the problem is about, when one is."""

    code = "replay_invalid"
    http_status = 400

    def __init__(
        self,
        message: str = "",
        *,
        code: str | None = None,
        option: str | None = None,
        http_status: int | None = None,
    ) -> None:
        super().__init__(message, code=code)
        self.option = option
        if http_status is not None:
            self.http_status = http_status


class RebuildError(JobqError):
    """The rebuild cannot start (a topic missing, a bad argument); nothing was written."""

    code = "rebuild_invalid"
