"""The far-future tier's in-memory time index of one schedule-topic partition (no I/O here).

The compacted topic is the store; this index only says which of its records are live and when each is
due, so the mover can fetch them by offset a horizon ahead. Per partition it keeps

* ``latest``: record key ``b"<queue>/<id>"`` → ``run_at << 40 | offset`` of the key's latest record
  (a later record or a tombstone replaces or removes it);
* time buckets: for each second of ``run_at``, the offsets of the records due then (``array('q')``, 8
  bytes each), with a heap of the bucket seconds.

Nothing else: no envelope is held. An offset in a bucket whose key has a later record since is skipped
lazily, when the bucket comes due (:meth:`PartitionIndex.is_latest` with the fetched record's key). About
150 bytes per live record in all (the key's bytes, the dict slot, the packed int, the bucket entry).
"""

from __future__ import annotations

import heapq
from array import array
from collections.abc import Iterator

__all__ = ["OFFSET_BITS", "RUN_AT_HEADER", "PartitionIndex", "parse_run_at"]

OFFSET_BITS = 40
"""Offsets below 2**40 (a trillion records in a partition) fit beside ``run_at``."""
_OFFSET_MASK = (1 << OFFSET_BITS) - 1
RUN_AT_HEADER = "jobq-run-at"
"""The header a far record carries (the relay writes it): its job's ``run_at`` in ms, decimal ASCII, so
an index build need not decode the envelope (records without it are decoded)."""


def parse_run_at(raw: bytes | str | None) -> int | None:
    """The header's value as ms (None: absent or not a number)."""
    if raw is None:
        return None
    try:
        return int(raw)
    except ValueError:
        return None


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
        """The key's record at ``offset`` is due at ``run_at`` (ms); it replaces any earlier one."""
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
        """Every live key with its ``run_at`` (the Redis index entries to rewrite)."""
        for key, packed in self.latest.items():
            yield key, packed >> OFFSET_BITS
