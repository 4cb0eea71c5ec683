"""How the fault suite shares running paths (pure): scenarios that can share a path run one after another,
and the runs a path records are read as they grow, each scenario's own."""

from __future__ import annotations

import itertools
from pathlib import Path

import orjson

from jqstack.manager import Endpoints
from loadtest.faults.run import PipelineKey, RanIds
from loadtest.faults.scenarios import SCENARIOS

EP = Endpoints("127.0.0.1:1", "127.0.0.1:2", "redis://127.0.0.1:3/0")


def test_scenarios_that_can_share_a_path_run_one_after_another() -> None:
    keys = [PipelineKey.of(s, EP) for s in SCENARIOS]
    runs = [key for key, _ in itertools.groupby(keys)]
    assert len(runs) == len(set(runs)), "a key comes back after another's: its path would start twice"
    assert len(runs) < len(keys) - 10, "most scenarios share a path"


def test_the_runs_of_a_path_are_read_as_they_grow_and_only_a_scenarios_own(tmp_path: Path) -> None:
    log = tmp_path / "exec-1.jsonl"
    lines = [
        {"id": "a-1", "run": 1},
        {"run": 1, "end": 2.0},
        {"id": "b-1", "run": 2},
        {"id": "a-2", "run": 3},
    ]
    log.write_bytes(b"".join(orjson.dumps(line) + b"\n" for line in lines[:2]))
    ran = RanIds(tmp_path, "a-")
    assert ran() == {"a-1"}
    with log.open("ab") as f:
        f.write(orjson.dumps(lines[2]) + b"\n" + orjson.dumps(lines[3])[:-3])  # the last line torn
    assert ran() == {"a-1"}, "another scenario's run, and a line not written whole yet"
    with log.open("ab") as f:
        f.write(orjson.dumps(lines[3])[-3:] + b"\n")
    (tmp_path / "exec-2.jsonl").write_bytes(orjson.dumps({"id": "a-3", "run": 1}) + b"\n")
    assert ran() == {"a-1", "a-2", "a-3"}
