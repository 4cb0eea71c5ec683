"""A topic's holding lane as pure state: which queues are held, where their records wait in ``<topic>.held``
and what is drained — and the lane consumer group's commit metadata that carries it across relay terms.

The relay (``jqrelay.lane``) keeps one :class:`LaneState` per term. Per lane partition it knows:

* ``committed`` (C): every record below it is drained;
* ``known`` (S): every record below it is known — it belongs to a queue's **run** (a stretch of contiguous
  offsets of that queue's undrained records) or it is drained; records at or after S were not seen by this
  term (the tail a previous term produced after its last lane commit);
* per queue, its runs.

The lane group's committed offset per partition is C, with :func:`encode_metadata` as commit metadata:
``{"v": 1, "s": S, "q": {queue: first undrained offset}}``. A new term reads it back
(:func:`decode_metadata`): every listed queue is held at once; the records in ``[S, end)`` are scanned
before the first batch is planned (the barrier), those in ``[C, S)`` of listed queues in the background.
Offsets are Kafka's; a queue's records are in one lane partition (:meth:`LaneState.partition_for`, sticky
while it has records there), so its runs are drained in lane order, which is the order they were read from
the source topic in.
"""

from __future__ import annotations

import zlib
from collections import Counter
from dataclasses import dataclass, field

import orjson

__all__ = [
    "METADATA_MAX_BYTES",
    "SOURCE_HEADER",
    "Hold",
    "LanePartition",
    "LaneState",
    "Run",
    "decode_metadata",
    "encode_metadata",
    "lane_partition",
]

METADATA_MAX_BYTES = 3000
"""Commit metadata kept under this many bytes (the broker's ``offset.metadata.max.bytes`` is 4096 by
default): when the held queues of a partition do not fit, those with the lowest first offsets are kept
and S lowered to the first one left out — what lies above it is scanned again by the next term (slower,
never wrong)."""


SOURCE_HEADER = "jobq-source"
"""The header naming where a record set aside (into a holding lane, or dead) was first read:
``topic/partition/offset`` — the job's origin when it is written."""


def lane_partition(queue: str, partitions: int) -> int:
    """The lane partition a queue's records go to when it has none waiting (crc32 of its name)."""
    return zlib.crc32(queue.encode()) % max(1, partitions)


@dataclass(slots=True)
class Run:
    """A stretch ``[start, end)`` of one queue's undrained records in a lane partition; ``at``: when its
    first record was set aside (ms)."""

    start: int
    end: int
    at: int

    def __len__(self) -> int:
        return self.end - self.start


@dataclass
class LanePartition:
    committed: int = 0
    known: int = 0
    runs: dict[str, list[Run]] = field(default_factory=dict)
    listed: dict[str, int] = field(default_factory=dict)
    """The queues a previous term listed with their first undrained offset, while ``[C, S)`` is scanned."""
    scanning: bool = False

    def first_undrained(self) -> int:
        starts = [runs[0].start for runs in self.runs.values() if runs]
        starts += list(self.listed.values()) if self.scanning else []
        return min([*starts, self.known])

    def add(self, queue: str, offset: int, at: int) -> None:
        """Record ``offset`` as ``queue``'s undrained record (after every run it has)."""
        runs = self.runs.setdefault(queue, [])
        if runs and runs[-1].end == offset:
            runs[-1].end += 1
        else:
            runs.append(Run(offset, offset + 1, at))
        self.known = max(self.known, offset + 1)

    def undrained(self, queue: str, offset: int) -> bool:
        """Whether a record of ``[C, S)`` is one of a listed queue's undrained ones (while scanning)."""
        first = self.listed.get(queue)
        return first is not None and offset >= first

    def drained(self, queue: str, upto: int) -> None:
        """``queue``'s records below ``upto`` are drained."""
        runs = self.runs.get(queue, [])
        while runs and runs[0].end <= upto:
            runs.pop(0)
        if runs and runs[0].start < upto:
            runs[0].start = upto
        if not runs:
            self.runs.pop(queue, None)

    def metadata(self) -> tuple[int, str]:
        """(C, the commit metadata) of this partition now."""
        queues = {q: runs[0].start for q, runs in self.runs.items() if runs}
        if self.scanning:
            for q, first in self.listed.items():
                queues[q] = min(first, queues.get(q, first))
        return encode_metadata(self.known, queues)


def encode_metadata(known: int, queues: dict[str, int]) -> tuple[int, str]:
    """(C, metadata) for a partition whose records below ``known`` are known and whose held queues have
    their first undrained records at ``queues``; within :data:`METADATA_MAX_BYTES` (see there)."""
    items = sorted(queues.items(), key=lambda kv: kv[1])
    while True:
        text = orjson.dumps({"v": 1, "s": known, "q": dict(items)}).decode()
        if len(text.encode()) <= METADATA_MAX_BYTES or not items:
            break
        known = min(known, items.pop()[1])
    return min([known, *(o for _, o in items)]), text


def decode_metadata(text: str | None) -> tuple[int, dict[str, int]] | None:
    """(S, queue → first undrained offset) of a commit's metadata; None when there is none or it is not
    jobq's (the lane is then scanned from the committed offset)."""
    try:
        doc = orjson.loads(text or "")
    except orjson.JSONDecodeError:
        return None
    if not isinstance(doc, dict) or doc.get("v") != 1 or not isinstance(doc.get("s"), int):
        return None
    queues = doc.get("q")
    if not isinstance(queues, dict):
        queues = {}
    return doc["s"], {str(q): int(o) for q, o in queues.items() if isinstance(o, int)}


@dataclass
class Hold:
    """Why a queue is held now (``paused``, ``rate``, ``memory``, ``draining``) and since when (ms)."""

    reason: str
    since: int
    first_source: str = ""
    """The first source record set aside (``topic/partition/offset``), for the log."""


@dataclass
class LaneState:
    """One term's view of a topic's holding lane (see the module)."""

    partitions: int
    parts: dict[int, LanePartition] = field(default_factory=dict)
    held: dict[str, Hold] = field(default_factory=dict)
    inflight: Counter[str] = field(default_factory=Counter)
    """Records planned aside and not yet confirmed by Kafka, per queue."""

    def part(self, p: int) -> LanePartition:
        return self.parts.setdefault(p, LanePartition())

    def partition_for(self, queue: str) -> int:
        """Where ``queue``'s next records go: the partition its waiting records are in, else its own."""
        for p, part in sorted(self.parts.items()):
            if part.runs.get(queue) or (part.scanning and queue in part.listed):
                return p
        return lane_partition(queue, self.partitions)

    def hold(self, queue: str, reason: str, now_ms: int, first_source: str = "") -> bool:
        """Hold ``queue`` (True when it was not held), or update its reason."""
        hold = self.held.get(queue)
        if hold is None:
            self.held[queue] = Hold(reason, now_ms, first_source)
            return True
        hold.reason = reason
        return False

    def planned(self, queue: str, n: int) -> None:
        self.inflight[queue] += n

    def produced(self, queue: str, partition: int, offsets: list[int], at: int) -> None:
        """Kafka confirmed ``queue``'s records at ``offsets`` of ``partition`` (in order)."""
        part = self.part(partition)
        for offset in offsets:
            part.add(queue, offset, at)
        self.inflight[queue] -= len(offsets)
        if self.inflight[queue] <= 0:
            del self.inflight[queue]

    def records(self, queue: str) -> int:
        """``queue``'s undrained records this term knows of (and those in flight to the lane)."""
        waiting = sum(len(r) for part in self.parts.values() for r in part.runs.get(queue, []))
        return waiting + self.inflight.get(queue, 0)

    def oldest(self, queue: str) -> int | None:
        """When the oldest undrained record of ``queue`` was set aside (ms), None when it has none."""
        ats = [runs[0].at for part in self.parts.values() if (runs := part.runs.get(queue))]
        return min(ats) if ats else None

    def next_run(self, queue: str) -> tuple[int, Run] | None:
        """``queue``'s first undrained run that may be drained now (its partition fully known)."""
        for p, part in sorted(self.parts.items()):
            if part.scanning and queue in part.listed:
                return None
            runs = part.runs.get(queue)
            if runs:
                return p, runs[0]
        return None

    def drained(self, queue: str, partition: int, upto: int) -> None:
        self.part(partition).drained(queue, upto)

    def releasable(self, queue: str) -> bool:
        """Nothing of ``queue`` waits in the lane or is on its way there, and no scan may still find any."""
        if self.inflight.get(queue, 0) > 0:
            return False
        return not any(
            part.runs.get(queue) or (part.scanning and queue in part.listed) for part in self.parts.values()
        )

    def release(self, queue: str) -> Hold | None:
        return self.held.pop(queue, None)

    # ---- a new term reads the lane back -----------------------------------------------------------------
    def read_back(
        self, p: int, committed: int, metadata: str | None, low: int, high: int, at: int
    ) -> tuple[tuple[int, int] | None, tuple[int, int] | None, bool]:
        """Take partition ``p``'s committed offset (negative: none) and metadata and its watermarks: every
        queue listed is held at once. Returns the ranges to scan — the tail ``[S, high)`` (before the first
        batch is planned: :meth:`tail_record` each record) and ``[C, S)`` for the listed queues
        (:meth:`listed_scanned` when done) — and whether the committed state was beyond the partition's
        end (an unclean leader election: everything is scanned again, duplicates only)."""
        part = self.part(p)
        c = max(committed, low) if committed >= 0 else low
        known, queues = decode_metadata(metadata) or (c, {})
        reset = c > high or known > high or any(o > high for o in queues.values())
        if reset:
            c, known, queues = low, low, {}
        part.committed, part.known = c, max(known, c)
        part.listed = {q: max(o, c) for q, o in queues.items()}
        part.scanning = bool(part.listed)
        for queue in part.listed:
            self.hold(queue, "draining", at)
        tail = (part.known, high) if part.known < high else None
        return tail, ((c, part.known) if part.scanning else None), reset

    def tail_record(self, p: int, queue: str, offset: int, at: int) -> bool:
        """A record of the tail a previous term produced after its last commit: undrained; its queue is
        held (True when it was not)."""
        self.part(p).add(queue, offset, at)
        return self.hold(queue, "draining", at)

    def listed_scanned(self, p: int, runs: dict[str, list[Run]]) -> None:
        """The scan of ``[C, S)`` found these runs of the listed queues (their records at or after their
        first undrained offsets, :meth:`LanePartition.undrained`): they come before any other run."""
        part = self.part(p)
        for queue, found in runs.items():
            part.runs[queue] = found + part.runs.get(queue, [])
        part.listed, part.scanning = {}, False
