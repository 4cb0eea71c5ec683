"""The dashboard's refusals: a status and a stable machine-readable ``code``, shown as a page to a person
(with the code) and as ``{"error": {"code", "message"}}`` to a client asking for JSON."""

from __future__ import annotations

from jqcore.errors import JobqError

__all__ = ["WebError"]


class WebError(JobqError):
    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message, code=code, retriable=status == 503)
        self.status = self.http_status = status
