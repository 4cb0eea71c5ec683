"""The far-future tier's in-memory time index of one schedule-topic partition (no I/O here).

The compacted topic is the store; this index only says which of its records are live and when each is
due, so the mover can fetch them by offset a horizon ahead. Per partition it keeps

* ``latest``: the record's key, packed by :class:`Keys` (the queue as a number, a jobq id as its 13
  bytes), → ``run_at << 40 | offset`` of the key's latest record (a later record or a tombstone replaces
  or removes it);
* time buckets: for each second of ``run_at``, the offsets of the records due then (``array('q')``, 8
  bytes each), with a heap of the bucket seconds.

Nothing else: no envelope is held. An offset in a bucket whose key has a later record since is skipped
lazily, when the bucket comes due (:meth:`PartitionIndex.is_latest` with the fetched record's key). About
150 bytes per live record in all (the packed key, the dict slot, the packed int, the bucket entry).
"""

from __future__ import annotations

import binascii
import heapq
from array import array
from collections.abc import Iterator

from jqcore.envelope import decode
from jqruntime.kafka import RUN_AT_HEADER

__all__ = ["OFFSET_BITS", "Keys", "PartitionIndex", "parse_run_at", "record_run_at"]

OFFSET_BITS = 40
"""Offsets below 2**40 (a trillion records in a partition) fit beside ``run_at``."""
_OFFSET_MASK = (1 << OFFSET_BITS) - 1
_RAW = 0x8000
"""Set in a packed key's queue number when the id follows as UTF-8 (not a 26-hex-digit jobq id)."""
_HEX_ID = 26


class Keys:
    """Schedule-topic keys ``<queue>/<id>`` packed small: 2 bytes of queue number (this table's), then
    the id — 13 bytes for a jobq id (26 lowercase hex digits), else its UTF-8 with the number's high bit
    set. 48 bytes a key in memory instead of ~80."""

    def __init__(self) -> None:
        self._numbers: dict[bytes, bytes] = {}
        """A queue's UTF-8 name → its number, 2 bytes."""
        self._queues: list[str] = []

    def pack(self, queue: str, job_id: str) -> bytes:
        return self._pack(queue.encode(), job_id.encode())

    def pack_record_key(self, key: bytes | None) -> bytes | None:
        """A schedule-topic record's key ``<queue>/<id>`` packed; None when it is not one."""
        queue, slash, job_id = (key or b"").partition(b"/")
        if not (slash and queue and job_id):
            return None
        return self._pack(queue, job_id)

    def _pack(self, queue: bytes, job_id: bytes) -> bytes:
        number = self._numbers.get(queue)
        if number is None:
            if len(self._queues) >= _RAW:
                raise ValueError("more than 32,767 queues in one schedule topic")
            number = self._numbers[queue] = len(self._queues).to_bytes(2, "big")
            self._queues.append(queue.decode("utf-8", "replace"))
        if len(job_id) == _HEX_ID:
            try:
                raw = binascii.unhexlify(job_id)
            except binascii.Error:
                raw = b""
            if raw and binascii.hexlify(raw) == job_id:
                return number + raw
        return (number[0] | 0x80).to_bytes(1, "big") + number[1:] + job_id

    def unpack(self, key: bytes) -> tuple[str, str]:
        """``(queue, id)``."""
        number = int.from_bytes(key[:2], "big")
        if number & _RAW:
            return self._queues[number & ~_RAW], key[2:].decode("utf-8", "replace")
        return self._queues[number], key[2:].hex()


def parse_run_at(raw: bytes | str | None) -> int | None:
    """The header's value as ms (None: absent or not a number)."""
    if raw is None:
        return None
    try:
        return int(raw)
    except ValueError:
        return None


def record_run_at(headers: object, value: bytes | None) -> int | None:
    """A schedule-topic record's ``run_at`` (ms): its ``jobq-run-at`` header, else (a record written before
    the header existed) its envelope's; None for a tombstone. Raises :class:`EnvelopeError` for a record
    that is neither."""
    for name, raw in headers if isinstance(headers, list) else ():
        if name == RUN_AT_HEADER:
            run_at = parse_run_at(raw)
            if run_at is not None:
                return run_at
    if value is None:
        return None
    return decode(value).run_at or 0


class PartitionIndex:
    """The live records of one partition, by key and by the second they are due."""

    def __init__(self) -> None:
        self.latest: dict[bytes, int] = {}
        self._buckets: dict[int, array[int]] = {}
        self._seconds: list[int] = []
        self.read = 0
        """Records applied (each version and tombstone counts)."""

    def __len__(self) -> int:
        return len(self.latest)

    def put(self, key: bytes, offset: int, run_at: int) -> None:
        """The (packed) key's record at ``offset`` is due at ``run_at`` (ms); it replaces any earlier one."""
        self.read += 1
        self.latest[key] = max(0, run_at) << OFFSET_BITS | offset
        self._bucket(max(0, run_at) // 1000).append(offset)

    def _bucket(self, second: int) -> array[int]:
        bucket = self._buckets.get(second)
        if bucket is None:
            bucket = self._buckets[second] = array("q")
            heapq.heappush(self._seconds, second)
        return bucket

    def remove(self, key: bytes) -> bool:
        """A tombstone (or a move): the key is no longer live. True when it was."""
        self.read += 1
        return self.latest.pop(key, None) is not None

    def forget(self, key: bytes, offset: int) -> None:
        """The key's record at ``offset`` was moved: forget it unless a later record replaced it."""
        if self.is_latest(key, offset):
            del self.latest[key]

    def is_latest(self, key: bytes, offset: int) -> bool:
        """Whether the record at ``offset`` is still the key's latest (else it was superseded)."""
        packed = self.latest.get(key)
        return packed is not None and packed & _OFFSET_MASK == offset

    def run_at(self, key: bytes) -> int | None:
        packed = self.latest.get(key)
        return None if packed is None else packed >> OFFSET_BITS

    def next_due(self) -> int | None:
        """The start (ms) of the earliest bucket (None: empty)."""
        return self._seconds[0] * 1000 if self._seconds else None

    def take_due(self, cut_ms: int, limit: int) -> list[int]:
        """Offsets of the buckets starting at or before ``cut_ms``, earliest bucket first (whole buckets,
        at least one, up to about ``limit`` offsets), sorted; they leave the index's buckets (not
        ``latest``: :meth:`forget` once moved). Superseded offsets are included (checked on fetch)."""
        taken: list[int] = []
        while self._seconds and self._seconds[0] * 1000 <= cut_ms and (not taken or len(taken) < limit):
            second = heapq.heappop(self._seconds)
            taken.extend(self._buckets.pop(second))
        taken.sort()
        return taken

    def give_back(self, offsets: list[int]) -> None:
        """Offsets taken but not moved (the move failed): due again at once."""
        self._bucket(0).extend(offsets)

    def entries(self) -> Iterator[tuple[bytes, int]]:
        """Every live (packed) key with its ``run_at`` (the Redis index entries to rewrite)."""
        for key, packed in self.latest.items():
            yield key, packed >> OFFSET_BITS
