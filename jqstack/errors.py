"""The stack package's one error type.

``jqstack`` sits below every other jobq package (it imports none of them), so its error is not a
``jqcore.errors.JobqError``: callers that show errors to a person (the ``jobq`` CLI, the test session)
catch :class:`StackError` next to ``JobqError``.
"""

from __future__ import annotations

__all__ = ["StackError"]


class StackError(Exception):
    """A step of provisioning, starting, probing or stopping a local server or child process failed."""

    code = "stack_failed"

    @property
    def message(self) -> str:
        return str(self.args[0]) if self.args else self.code
