"""A smoke run of ``./run bench floors --quick`` on the session's stack: every hop is measured for jobq and
for its floor and has a ratio (no speed asserted)."""

from __future__ import annotations

import json
import math
import secrets
from typing import Any

import redis
from typer.testing import CliRunner

from jqstack.manager import Endpoints
from loadtest import __main__ as bench_cli
from loadtest import floors_bench
from loadtest.floors import lease


def test_floors_report_every_hop_beside_its_floor_with_a_ratio(endpoints: Endpoints) -> None:
    report = floors_bench.run(quick=True, endpoints=endpoints)
    folder = report.save()
    figures = json.loads((folder / "results.json").read_text())["figures"]
    for hop in floors_bench.HOPS:
        names = [n.removeprefix(f"{hop}: ") for n in figures if n.startswith(f"{hop}: ")]
        measures = {n.rsplit(" — ", 1)[0] for n in names}
        assert measures, f"{hop}: not measured"
        for measure in measures:
            assert {f"{measure} — {s}" for s in (*floors_bench.SYSTEMS, "ratio")} <= set(names), measure
        ratios = [figures[f"{hop}: {m} — ratio"]["median"] for m in measures]
        assert any(math.isfinite(r) and r > 0 for r in ratios), (hop, ratios)
    for hop, measure in (
        ("gateway", "requests/s"),
        ("relay", "jobs/s"),
        ("worker", "jobs/s steady"),
        ("path, 1 job/request", "CPU system total"),
        ("path, batched", "CPU system total"),
    ):
        for system in floors_bench.SYSTEMS:
            assert figures[f"{hop}: {measure} — {system}"]["median"] > 0, (hop, measure, system)
    table = (folder / "report.md").read_text()
    assert "| hop | measure | unit | jobq | floor | jobq / floor |" in table


def test_the_worker_hop_runs_alone_on_redis(endpoints: Endpoints) -> None:
    """``--hop worker``: the worker hop's figures, both systems and their ratio, no other hop's."""
    report = floors_bench.run(quick=True, endpoints=endpoints, hop="worker")
    figures = json.loads((report.save() / "results.json").read_text())["figures"]
    assert {n.split(": ", 1)[0] for n in figures} == {"worker"}
    for system in (*floors_bench.SYSTEMS, "ratio"):
        assert figures[f"worker: worker CPU — {system}"]["median"] > 0, system


def test_the_gateway_hop_runs_alone(endpoints: Endpoints) -> None:
    """``--hop gateway``: the gateway's figures, both systems and their ratio, no other hop's."""
    report = floors_bench.run(quick=True, endpoints=endpoints, profile=False, hop="gateway")
    figures = json.loads((report.save() / "results.json").read_text())["figures"]
    assert {n.split(": ", 1)[0] for n in figures} == {"gateway"}
    assert any(note.startswith("the gateway hop alone") for note in report.notes), report.notes
    for system in (*floors_bench.SYSTEMS, "ratio"):
        assert figures[f"gateway: requests/s — {system}"]["median"] > 0, system
        # the event loop's thread apart from the process: a part of it, never more
        loop = figures[f"gateway: gateway event loop CPU — {system}"]["median"]
        assert loop > 0, system
        if system != "ratio":
            assert loop <= figures[f"gateway: gateway CPU — {system}"]["median"], system


def test_the_floor_lease_queue_keeps_its_promise(endpoints: Endpoints) -> None:
    """Claimed with a deadline and a token, completed only by that token, claimed again once the lease
    ran out (the floors are yardsticks, but they must keep the promise they are measured by)."""
    client = redis.Redis.from_url(endpoints.redis_url or "")
    queue = f"floor-test-{secrets.token_hex(4)}"
    settle_claim = client.register_script(lease.SETTLE_CLAIM)
    keys = lease.keys(queue)

    def call(now: int, n: int, *done: bytes) -> list[Any]:
        return list(settle_claim(keys, [now, 100, n, *done]))

    try:
        pipe = client.pipeline(transaction=False)
        lease.write(pipe, queue, [(b"a", b"pa"), (b"b", b"pb"), (b"c", b"pc")], 1)
        lease.write(pipe, queue, [(b"a", b"pa")], 2)  # a batch written again: nothing added
        pipe.execute()
        first = call(1_000, 2)
        assert first[0] == 0
        assert (first[1], first[3], first[4], first[6]) == (b"a", b"pa", b"b", b"pb")
        token_a = first[2]
        assert call(1_050, 0, b"a", b"not-its-token") == [0]  # only its token completes it
        again = call(2_000, 1)  # a's and b's leases ran out at 1,100: claimed again, a first
        assert (again[1], again[3]) == (b"a", b"pa")
        assert again[2] != token_a
        assert call(2_010, 0, b"a", token_a) == [0]  # the old lease's token no longer completes it
        assert call(2_020, 0, b"a", again[2]) == [1]
        rest = call(5_000, 5)  # b (lease ran out again) and c
        assert sorted(rest[1::3]) == [b"b", b"c"]
        assert call(5_010, 5, rest[1], rest[2], rest[4], rest[5]) == [2]
        assert client.hlen(keys[2]) == client.zcard(keys[0]) == client.zcard(keys[1]) == 0
    finally:
        client.delete(*keys)
        client.close()


def test_slots_are_for_the_peers_only() -> None:
    result = CliRunner().invoke(bench_cli.app, ["gate", "--slots", "4"])
    assert result.exit_code == 2
    assert "--slots: peers only" in result.output


def test_hop_is_for_the_floors_and_a_hop_that_runs_alone() -> None:
    result = CliRunner().invoke(bench_cli.app, ["gate", "--hop", "worker"])
    assert (result.exit_code, "--hop: floors only" in result.output) == (2, True)
    result = CliRunner().invoke(bench_cli.app, ["floors", "--hop", "path"])
    assert (result.exit_code, "only gateway, relay, worker runs alone" in result.output) == (2, True)


def test_the_relay_hop_runs_alone(endpoints: Endpoints) -> None:
    report = floors_bench.run(quick=True, endpoints=endpoints, hop="relay")
    assert {f.name.split(": ", 1)[0] for f in report.figures} == {"relay"}
