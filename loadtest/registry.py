"""The benchmark scenarios ``./run bench`` runs: one explicit entry per scenario.

Each entry imports its module only when it runs (a scenario's libraries — matplotlib, hdrhistogram, a
Spark session — load for that scenario alone), with a plain ``import`` statement that the import
contracts see.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from loadtest.report import Report

__all__ = ["SCENARIOS", "drain", "neighbours", "peers", "startup", "trickle", "web"]


def _stack(quick: bool) -> Report:
    from loadtest import stack_bench

    return stack_bench.run(quick=quick)


def _engine(quick: bool) -> Report:
    from loadtest import engine_bench

    return engine_bench.run(quick=quick)


def drain(quick: bool, *, batch: int = 0) -> Report:
    """``./run bench drain``; ``--batch N``: a batch handler's items, in batches of N."""
    from loadtest import drain_bench

    return drain_bench.run(quick=quick, batch=batch)


def _fairness(quick: bool) -> Report:
    from loadtest import fair_bench

    return fair_bench.run(quick=quick)


def _relay(quick: bool) -> Report:
    from loadtest import relay_bench

    return relay_bench.run(quick=quick)


def _gate(quick: bool) -> Report:
    from loadtest import gate_bench

    return gate_bench.run(quick=quick)


def _spark(quick: bool) -> Report:
    from loadtest import spark_bench

    return spark_bench.run(quick=quick)


def _e2e(quick: bool) -> Report:
    from loadtest import e2e_bench

    return e2e_bench.run(quick=quick)


def _scheduler(quick: bool) -> Report:
    from loadtest import scheduler_bench

    return scheduler_bench.run(quick=quick)


def floors(quick: bool, *, hop: str | None = None) -> Report:
    """``./run bench floors``; ``--hop gateway`` or ``worker``: that hop alone (the worker's on a Redis of its
    own, no Kafka)."""
    from loadtest import floors_bench

    return floors_bench.run(quick=quick, hop=hop)


def peers(quick: bool, *, slots: int | None = None) -> Report:
    """``./run bench peers``; ``--slots N``: the one-shape table's slots per worker process (default 16)."""
    from loadtest import peers_bench

    return peers_bench.run(quick=quick) if slots is None else peers_bench.run(quick=quick, slots=slots)


def neighbours(quick: bool, *, backlog: int | None = None) -> Report:
    """``./run bench neighbours``; ``--backlog N``: the held queue's backlog (default 50,000; quick 300)."""
    from loadtest import neighbours_bench

    return neighbours_bench.run(quick=quick, backlog=backlog)


def startup(quick: bool, *, baseline: Path | None = None) -> Report:
    """``./run bench startup``; ``--baseline ROOT``: another checkout's jobq measured beside this one's."""
    from loadtest import startup_bench

    return startup_bench.run(quick=quick, baseline=baseline)


def trickle(quick: bool, *, baseline: Path | None = None) -> Report:
    """``./run bench trickle``; ``--baseline ROOT``: another checkout's jobq measured beside this one's."""
    from loadtest import trickle_bench

    return trickle_bench.run(quick=quick, baseline=baseline)


def _history(quick: bool) -> Report:
    from loadtest import history_bench

    return history_bench.run(quick=quick)


def _graphs(quick: bool) -> Report:
    from loadtest import graph_bench

    return graph_bench.run(quick=quick)


def _faults(quick: bool) -> Report:
    from loadtest import faults_bench

    return faults_bench.run(quick=quick)


def chaos(seed: int | None, minutes: float) -> Report:
    """``./run bench faults --chaos --seed N --minutes M``: one seeded multi-fault run (``None``: today's
    seed, printed)."""
    from loadtest import faults_bench
    from loadtest.faults.chaos import daily_seed

    return faults_bench.run_chaos(daily_seed() if seed is None else seed, minutes)


def _events(quick: bool) -> Report:
    from loadtest import events_bench

    return events_bench.run(quick=quick)


def _envelope(quick: bool) -> Report:
    from loadtest import envelope_bench

    return envelope_bench.run(quick=quick)


def web(
    quick: bool, *, jobs: int | None = None, history_rows: int | None = None, requests: int | None = None
) -> Report:
    """``./run bench web``, whose sizes the command line may set (``--jobs``, ``--history-rows``,
    ``--requests``; ``None``: the full or quick size)."""
    from loadtest import web_bench

    return web_bench.run(quick=quick, jobs=jobs, history_rows=history_rows, requests=requests)


SCENARIOS: dict[str, Callable[[bool], Report]] = {
    "stack": _stack,
    "engine": _engine,
    "drain": drain,
    "fairness": _fairness,
    "relay": _relay,
    "gate": _gate,
    "scheduler": _scheduler,
    "spark": _spark,
    "e2e": _e2e,
    "floors": floors,
    "startup": startup,
    "trickle": trickle,
    "peers": peers,
    "neighbours": neighbours,
    "history": _history,
    "graphs": _graphs,
    "web": web,
    "faults": _faults,
    "envelope": _envelope,
    "events": _events,
}
"""Scenario name → a function running it (``quick``: tiny sizes, one repetition) and returning its report."""
