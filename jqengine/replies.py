"""From raw script replies to typed values: the only code that reads what a Lua script returned.

Each function takes one script's reply (the shapes its ``-- returns:`` header line documents) and gives
back the value the engine returns, raising the jobq error a refused write means. Codes are compared as
:class:`~jqengine.codes.Code` members, never as bare numbers or words.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import orjson

from jqcore.envelope import Envelope, decode
from jqengine.codes import Code, FenceRejected, FilterInvalid, check
from jqengine.models import (
    CancelOutcome,
    CancelResult,
    ClaimedJob,
    EnqueueOutcome,
    Failed,
    Forgotten,
    HandedBack,
    NotExtended,
    Promoted,
    Released,
)
from jqengine.redisconn import text

__all__ = [
    "cancel",
    "cancel_running",
    "claim",
    "code",
    "enqueue",
    "extend",
    "fail",
    "far",
    "fence",
    "forget",
    "hand_back",
    "promoted",
    "release",
    "settled",
    "single",
    "snooze",
    "timer",
]

_NOT_EXTENDED = {Code.STALE: NotExtended.STALE, Code.MISSING: NotExtended.MISSING}
_NOT_EXTENDED[Code.CANCELED] = NotExtended.CANCELED
_RELEASED = {Code.OK: Released.RELEASED, Code.ERRORED: Released.ERRORED}
_RELEASED |= {Code.STALE: Released.STALE, Code.MISSING: Released.MISSING}
_FAILED = {Code.RETRY: Failed.RETRY, Code.ERRORED: Failed.ERRORED, Code.CANCELED: Failed.CANCELED}
_HANDED_BACK = {Code.OK: HandedBack.HANDED_BACK, Code.ERRORED: HandedBack.ERRORED}
_CANCELED = {
    Code.OK: CancelOutcome.CANCELED,
    Code.FLAGGED: CancelOutcome.FLAGGED,
    Code.TOMBSTONED: CancelOutcome.TOMBSTONED,
    Code.FINAL: CancelOutcome.FINAL,
}


def code(reply: Sequence[Any]) -> Code:
    """The code a reply starts with (``complete``'s whole answer; see :func:`check` for its meaning)."""
    return Code(int(reply[0]))


def fence(reply: Sequence[Any], source: str, fence: int) -> None:
    """Raise :class:`FenceRejected` when ``enqueue_batch`` refused a stale fence."""
    if code(reply) == Code.FENCE_STALE:
        raise FenceRejected(source, fence, int(reply[1]))


def enqueue(
    batch: Sequence[Envelope], reply: Sequence[Any], source: str, fence_: int
) -> tuple[bool, list[EnqueueOutcome]]:
    """``enqueue_batch``: (the queue was created by it, one outcome per job)."""
    fence(reply, source, fence_)
    outcomes = []
    for env, raw in zip(batch, reply[2:], strict=True):
        word = text(raw)
        if word.startswith("refused:"):
            outcomes.append(EnqueueOutcome(env.id, env.queue, "refused", word.removeprefix("refused:")))
        else:
            outcomes.append(EnqueueOutcome(env.id, env.queue, word))  # type: ignore[arg-type]
    return int(reply[1]) == 1, outcomes


def claim(queue: str, reply: Sequence[Any], now: int) -> list[ClaimedJob]:
    """``claim``: the claimed jobs (none while the queue is paused); raises :class:`FilterInvalid`."""
    answer = code(reply)
    if answer == Code.PAUSED:
        return []
    if answer == Code.FILTER_UNKNOWN:
        raise FilterInvalid(
            f"queue {queue!r} does not index meta key {text(reply[1])!r}; declare it in the queue's"
            " filter_keys to claim by it"
        )
    return claimed_rows(reply[1:], now)


def claimed_rows(rows: Sequence[Any], now: int) -> list[ClaimedJob]:
    """Claimed jobs from their flat rows (id, envelope, attempt, token, deadline, …): a claim's reply or
    a hand-off message."""
    return [
        ClaimedJob(
            decode(rows[i + 1]), int(rows[i + 2]), text(rows[i + 3]), int(rows[i + 4]), int(rows[i + 4]) - now
        )
        for i in range(0, len(rows), 5)
    ]


def handed(messages: Sequence[bytes | str], now: int) -> list[ClaimedJob]:
    """The jobs of hand-off messages (each a JSON array of claimed rows, see ``lua/lib/hand_off.lua``)."""
    return [job for message in messages for job in claimed_rows(orjson.loads(message), now)]


def extend(ids: Sequence[str], reply: Sequence[Any]) -> dict[str, int | NotExtended]:
    """``extend``: per id the new lease deadline (ms) or why it was not extended."""
    return {i: int(c) if int(c) > 0 else _NOT_EXTENDED[Code(int(c))] for i, c in zip(ids, reply, strict=True)}


def single(reply: Sequence[Any], job_id: str, what: str) -> None:
    """A single-job write answered ``{C_OK}`` (complete); raises for a stale or missing job."""
    check(int(reply[0]), job_id, what)


def fail(reply: Sequence[Any], job_id: str) -> Failed:
    check(int(reply[0]), job_id, "fail")
    return _FAILED[code(reply)]


def snooze(reply: Sequence[Any], job_id: str) -> int:
    """``snooze``: when the job runs again (ms)."""
    check(int(reply[0]), job_id, "snooze")
    return int(reply[1])


def hand_back(reply: Sequence[Any], job_id: str) -> HandedBack:
    check(int(reply[0]), job_id, "hand_back")
    return _HANDED_BACK[code(reply)]


def cancel_running(reply: Sequence[Any], job_id: str) -> None:
    """``cancel_running`` answers ``{C_CANCELED}``; raises for a stale or missing job."""
    check(int(reply[0]), job_id, "cancel")


def release(ids: Sequence[str], reply: Sequence[Any]) -> dict[str, Released]:
    return {i: _RELEASED[Code(int(c))] for i, c in zip(ids, reply, strict=True)}


def cancel(reply: Sequence[Any]) -> CancelResult:
    return CancelResult(_CANCELED[code(reply)], text(reply[1]))


def far(reply: Sequence[Any]) -> list[str]:
    """``schedule_far``: per job ``scheduled`` or ``held``."""
    code(reply)
    return [text(word) for word in reply[1:]]


def forget(reply: Sequence[Any]) -> list[Forgotten]:
    return [Forgotten(text(word)) for word in reply]


def timer(reply: Sequence[Any]) -> tuple[int, int]:
    """``reap_expired``: (jobs moved, the next due time or -1)."""
    return int(reply[0]), int(reply[1])


def promoted(reply: Sequence[Any]) -> Promoted:
    """``promote_due``: jobs promoted, the next ``run_at`` or -1, and each promoted job's lateness."""
    return Promoted(int(reply[0]), int(reply[1]), tuple(int(x) for x in reply[2]))


def settled(reply: Sequence[Any]) -> list[tuple[Code, int]]:
    """``settle``'s answer: per job its code and the retry's run_at (0 unless ``RETRY``)."""
    return [(Code(int(reply[i])), int(reply[i + 1])) for i in range(1, len(reply), 2)]
