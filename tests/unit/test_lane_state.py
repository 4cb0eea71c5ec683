"""The holding lane's state (``jqcore.lane``) as pure logic: runs, commit metadata (and its truncation), and a
model run — records set aside and drained, commits, crashes and recoveries from "Kafka" alone — that holds
"nothing lost, each queue's records drained in the order they were set aside"."""

from __future__ import annotations

from dataclasses import dataclass, field

from hypothesis import given, settings
from hypothesis import strategies as st

from jqcore.lane import METADATA_MAX_BYTES, LanePartition, LaneState, decode_metadata, encode_metadata


def test_runs_merge_when_contiguous_and_are_trimmed_as_drained() -> None:
    part = LanePartition()
    for offset in (0, 1, 2, 5, 6):
        part.add("a", offset, 1)
    part.add("b", 3, 2)
    assert [(r.start, r.end) for r in part.runs["a"]] == [(0, 3), (5, 7)]
    assert part.known == 7
    part.drained("a", 2)
    assert [(r.start, r.end) for r in part.runs["a"]] == [(2, 3), (5, 7)]
    assert part.metadata()[0] == 2, "C: the first undrained record"
    part.drained("a", 7)
    assert "a" not in part.runs
    assert part.metadata() == (3, '{"v":1,"s":7,"q":{"b":3}}')


def test_metadata_reads_back_and_a_foreign_or_broken_one_is_none() -> None:
    c, text = encode_metadata(40, {"a": 10, "b": 30})
    assert c == 10
    assert decode_metadata(text) == (40, {"a": 10, "b": 30})
    for bad in (None, "", "not json", '{"v": 2, "s": 1}', '{"v": 1}', "[1]"):
        assert decode_metadata(bad) is None


def test_metadata_too_large_keeps_the_lowest_offsets_and_lowers_what_is_known() -> None:
    queues = {f"q{i}-" + "x" * 400: 100 + i for i in range(20)}
    c, text = encode_metadata(500, queues)
    assert len(text.encode()) <= METADATA_MAX_BYTES
    known, kept = decode_metadata(text) or (0, {})
    assert kept == {q: o for q, o in queues.items() if o < known}, "the lowest first offsets kept"
    assert known == min(o for q, o in queues.items() if q not in kept), "S lowered to the first left out"
    assert c == 100


def test_a_state_beyond_the_partitions_end_is_read_back_from_its_start() -> None:
    state = LaneState(1)
    _, text = encode_metadata(50, {"a": 20})
    tail, scan, reset = state.read_back(0, 20, text, 5, 30, 0)
    assert reset, "S beyond the end (an unclean election lost records)"
    assert (tail, scan) == ((5, 30), None), "everything from the low watermark is scanned as undrained"


def test_a_listed_queue_is_held_and_not_drained_until_its_range_is_scanned() -> None:
    state = LaneState(2)
    _, text = encode_metadata(10, {"a": 4})
    tail, scan, _ = state.read_back(1, 4, text, 0, 12, 0)
    assert "a" in state.held
    assert (tail, scan) == ((10, 12), (4, 10))
    state.tail_record(1, "a", 10, 0)
    assert state.next_run("a") is None, "its earlier records are not known yet"
    assert state.partition_for("a") == 1, "new records go where its waiting ones are"
    assert not state.releasable("a")
    found = LanePartition()
    for offset in (4, 6, 7):
        found.add("a", offset, 0)
    state.listed_scanned(1, found.runs)
    assert [(r.start, r.end) for r in state.part(1).runs["a"]] == [(4, 5), (6, 8), (10, 11)]


# ---- the model ----------------------------------------------------------------------------------------


@dataclass
class Kafka:
    """The lane's partitions (each record: its queue, its number in the queue) and the group's commits."""

    partitions: int
    log: dict[int, list[tuple[str, int]]] = field(default_factory=dict)
    commits: dict[int, tuple[int, str]] = field(default_factory=dict)


@dataclass
class Term:
    state: LaneState
    scans: list[tuple[int, int, int]] = field(default_factory=list)
    """Listed ranges whose scan is still running."""


def recover(kafka: Kafka) -> Term:
    """A new term, read back from "Kafka" alone, as ``jqrelay.lane.Lane.start`` does."""
    term = Term(LaneState(kafka.partitions))
    for p in range(kafka.partitions):
        log = kafka.log.get(p, [])
        committed, text = kafka.commits.get(p, (-1, ""))
        tail, scan, _ = term.state.read_back(p, committed, text or None, 0, len(log), 0)
        if tail is not None:
            for offset in range(*tail):
                term.state.tail_record(p, log[offset][0], offset, 0)
        if scan is not None:
            term.scans.append((p, *scan))
    return term


def finish_scan(kafka: Kafka, term: Term) -> None:
    p, start, end = term.scans.pop(0)
    part, found = term.state.part(p), LanePartition()
    for offset in range(start, end):
        queue = kafka.log[p][offset][0]
        if part.undrained(queue, offset):
            found.add(queue, offset, 0)
    term.state.listed_scanned(p, found.runs)


QUEUES = ["a", "b", "c", "d-" + "x" * 900, "e-" + "y" * 900]
"""Five queues over two lane partitions; the long names overflow the commit metadata (truncation)."""

step = st.one_of(
    st.tuples(st.just("aside"), st.sampled_from(QUEUES), st.integers(1, 6)),
    st.tuples(st.just("drain"), st.sampled_from(QUEUES), st.integers(1, 4)),
    st.tuples(st.just("commit"), st.just(""), st.just(0)),
    st.tuples(st.just("crash"), st.just(""), st.just(0)),
    st.tuples(st.just("scan"), st.just(""), st.just(0)),
)


@dataclass
class Model:
    kafka: Kafka = field(default_factory=lambda: Kafka(2))
    sent: dict[str, int] = field(default_factory=lambda: dict.fromkeys(QUEUES, 0))
    redis: list[tuple[str, int]] = field(default_factory=list)
    """What reached "Redis", in order (duplicates included)."""

    def __post_init__(self) -> None:
        self.term = recover(self.kafka)

    def aside(self, queue: str, n: int) -> None:
        state = self.term.state
        p = state.partition_for(queue)
        log = self.kafka.log.setdefault(p, [])
        state.planned(queue, n)
        offsets = list(range(len(log), len(log) + n))
        log.extend((queue, self.sent[queue] + i) for i in range(n))
        self.sent[queue] += n
        state.produced(queue, p, offsets, 0)

    def drain(self, queue: str, k: int) -> None:
        found = self.term.state.next_run(queue)
        if found is not None:
            p, run = found
            upto = min(run.end, run.start + k)
            self.redis.extend(self.kafka.log[p][run.start : upto])
            self.term.state.drained(queue, p, upto)

    def commit(self) -> None:
        for p, part in self.term.state.parts.items():
            self.kafka.commits[p] = part.metadata()

    def crash(self) -> None:
        self.term = recover(self.kafka)

    def scan(self) -> None:
        if self.term.scans:
            finish_scan(self.kafka, self.term)

    def drain_all(self) -> None:
        while self.term.scans:
            finish_scan(self.kafka, self.term)
        for queue in QUEUES:
            while self.term.state.next_run(queue) is not None:
                self.drain(queue, 10**6)


@settings(max_examples=300, deadline=None)
@given(st.lists(step, max_size=60))
def test_crashes_anywhere_lose_nothing_and_keep_each_queues_order(steps: list[tuple[str, str, int]]) -> None:
    model = Model()
    for op, queue, n in steps:
        if op in ("aside", "drain"):
            getattr(model, op)(queue, n)
        else:
            getattr(model, op)()
    model.drain_all()
    # nothing lost: every record set aside reached "Redis"
    assert {(q, i) for q in QUEUES for i in range(model.sent[q])} <= set(model.redis)
    # in order: each queue's first arrivals are in the order its records were set aside
    for queue in QUEUES:
        firsts = list(dict.fromkeys(i for q, i in model.redis if q == queue))
        assert firsts == sorted(firsts), queue
    # and at rest: every partition committed to its end, no queue listed
    for p, part in model.term.state.parts.items():
        c, text = part.metadata()
        assert c == len(model.kafka.log.get(p, []))
        assert decode_metadata(text) == (c, {})
    assert all(model.term.state.releasable(q) for q in QUEUES)
