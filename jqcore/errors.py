"""One error hierarchy for all of jobq.

Every error raised on purpose by jobq code derives from :class:`JobqError`. Each class carries

* ``code`` — a short, stable, machine-readable reason (used in HTTP error bodies and CLI messages);
* ``retriable`` — whether trying the same operation again later may succeed (backend down, memory full)
  or never will (bad input, stale lease token);
* ``http_status`` — the status an HTTP API answers it with. The gateway reads these two attributes and
  nothing else: a 503 (with ``Retry-After``) is given to retriable errors only, so a client told to retry
  can succeed by retrying, and a request that can never succeed gets a 4xx (or a 500 for a server bug).

Handler control flow (``Retry``, ``Cancel``, ``Snooze``) lives here too, because workers written against
the HTTP API use the same vocabulary as Python handlers.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "BackendUnavailable",
    "Cancel",
    "ConfigError",
    "CronInvalid",
    "CronNotFound",
    "EnvelopeError",
    "FieldError",
    "GraphConflict",
    "GraphIdTaken",
    "GraphInvalid",
    "GraphNotFound",
    "HandlerControl",
    "JobqError",
    "QueryInvalid",
    "QueryTimeout",
    "Retry",
    "Snooze",
]


class JobqError(Exception):
    """Base of every jobq error."""

    code: str = "jobq_error"
    retriable: bool = False
    http_status: int = 500

    def __init__(self, message: str = "", *, code: str | None = None, retriable: bool | None = None) -> None:
        super().__init__(message or self.__class__.__doc__ or self.code)
        if code is not None:
            self.code = code
        if retriable is not None:
            self.retriable = retriable

    @property
    def message(self) -> str:
        return str(self.args[0]) if self.args else self.code


class ConfigError(JobqError):
    """A setting is missing, malformed or inconsistent with another one."""

    code = "config_invalid"
    http_status = 500  # a setting is the operator's to fix, never the client's


class BackendUnavailable(JobqError):
    """Kafka, Redis or Consul did not answer in time; the operation may succeed later."""

    code = "backend_unavailable"
    retriable = True
    http_status = 503


@dataclass(frozen=True, slots=True)
class FieldError:
    """One problem with one field of an input document."""

    field: str
    problem: str

    def as_dict(self) -> dict[str, str]:
        return {"field": self.field, "problem": self.problem}


class EnvelopeError(JobqError):
    """A job envelope is malformed; ``fields`` names each offending field and the problem."""

    code = "envelope_invalid"
    http_status = 400

    def __init__(self, fields: list[FieldError] | FieldError, *, code: str | None = None) -> None:
        self.fields: tuple[FieldError, ...] = (fields,) if isinstance(fields, FieldError) else tuple(fields)
        summary = "; ".join(f"{f.field}: {f.problem}" for f in self.fields) or "invalid envelope"
        super().__init__(summary, code=code)


class CronInvalid(EnvelopeError):
    """A cron schedule is malformed; ``fields`` names each offending field and the problem."""

    code = "cron_invalid"


class GraphInvalid(EnvelopeError):
    """A task graph is refused whole (a cycle, an unknown parent, too many nodes, a bad node); ``fields``
    names each problem (``nodes[3].parents``...)."""

    code = "graph_invalid"


class GraphNotFound(JobqError):
    """No task graph has this id (never submitted, not relayed yet, or past its retention)."""

    code = "graph_not_found"
    http_status = 404


class GraphIdTaken(JobqError):
    """The id is a graph of another home queue (a graph id belongs to the queue it was made for)."""

    code = "graph_id_taken"
    http_status = 409


class GraphConflict(JobqError):
    """The graph is not in a state that allows this (retrying a graph that is still running)."""

    code = "graph_conflict"
    http_status = 409


class CronNotFound(JobqError):
    """No cron schedule has this name."""

    code = "cron_not_found"
    http_status = 404


class QueryInvalid(JobqError):
    """A query of the history tables is refused: not a single read-only SELECT, unknown columns, a bad
    cursor or report option. Asking again unchanged never succeeds."""

    code = "query_invalid"
    http_status = 400


class QueryTimeout(JobqError):
    """A query of the history tables ran past its time limit (``JOBQ_HISTORY_QUERY_TIMEOUT_S``) and was
    interrupted. Narrow it (a queue, a kind, a time range); asking again unchanged is as slow."""

    code = "history_timeout"
    http_status = 504


class HandlerControl(Exception):
    """Base of the exceptions a handler raises to steer what happens to its job."""


class Retry(HandlerControl):
    """Fail this attempt and retry after ``delay_s`` seconds (``None``: the job type's backoff)."""

    def __init__(self, delay_s: float | None = None, reason: str = "retry requested") -> None:
        super().__init__(reason)
        self.delay_s = delay_s
        self.reason = reason


class Cancel(HandlerControl):
    """Stop this job for good; it is never retried."""

    def __init__(self, reason: str = "canceled by handler") -> None:
        super().__init__(reason)
        self.reason = reason


class Snooze(HandlerControl):
    """Put the job back for ``delay_s`` seconds without spending an attempt."""

    def __init__(self, delay_s: float) -> None:
        super().__init__(f"snoozed for {delay_s}s")
        self.delay_s = delay_s
