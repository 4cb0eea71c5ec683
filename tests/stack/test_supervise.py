"""The process supervisor with real child processes: stop is TERM, grace, KILL of the whole group;
readiness is a real probe, and a child that dies while starting fails the wait at once with its log."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from jqstack.errors import StackError
from jqstack.procs import free_port
from jqstack.supervise import RESTARTS, ChildExited, Children, alive, python_m, start, tcp_open, wait_until

IGNORES_TERM = (
    "import signal\n"
    "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
    "print('ready', flush=True)\n"
    "signal.pause()\n"
)
SLEEPS = "import signal; signal.pause()"
"""A child that lives until a signal ends it."""


def _until(check: Callable[[], bool], what: str, timeout_s: float = 30) -> None:
    wait_until(check, what=what, timeout_s=timeout_s, interval_s=0.02)


def _says(log: Path, line: str) -> Callable[[], bool]:
    return lambda: line in log.read_text()


def _grandchild_script(pid_file: Path, *, parent_exits: bool) -> str:
    """A parent that starts a TERM-ignoring grandchild (same group), writes its pid, then sleeps or
    exits (leaving the grandchild as the group's only member)."""
    return (
        "import subprocess, sys\n"
        f"p = subprocess.Popen([sys.executable, '-c', {IGNORES_TERM!r}], stdout=subprocess.PIPE)\n"
        "p.stdout.readline()\n"  # its SIGTERM handler is installed
        f"open({str(pid_file)!r} + '.tmp', 'w').write(str(p.pid))\n"
        f"__import__('os').replace({str(pid_file)!r} + '.tmp', {str(pid_file)!r})\n"
        + ("" if parent_exits else f"{SLEEPS}\n")
    )


def test_a_child_that_ignores_sigterm_is_killed_after_the_grace(tmp_path: Path) -> None:
    log = tmp_path / "stubborn.log"
    child = start("stubborn", [sys.executable, "-c", IGNORES_TERM], output=log)
    _until(_says(log, "ready"), "its SIGTERM handler")
    assert child.stop(grace_s=0.5) is True
    assert child.returncode == -signal.SIGKILL
    assert not alive(child.pid)


def test_a_child_that_exits_on_sigterm_is_not_killed() -> None:
    child = start("polite", [sys.executable, "-c", SLEEPS])
    assert child.stop(grace_s=30) is False
    assert child.returncode == -signal.SIGTERM
    assert child.stop(grace_s=30) is False  # idempotent


def test_a_paused_child_is_continued_and_stopped_without_a_kill() -> None:
    child = start("paused", [sys.executable, "-c", SLEEPS])
    child.signal(signal.SIGSTOP)
    assert child.stop(grace_s=30) is False
    assert child.returncode == -signal.SIGTERM


@pytest.mark.parametrize("parent_exits", [False, True], ids=["parent-running", "parent-gone"])
def test_stop_takes_the_whole_process_group_with_it(tmp_path: Path, parent_exits: bool) -> None:
    """A grandchild that ignores SIGTERM is killed too, also when its parent (the group leader) has
    already exited and only the grandchild is left in the group."""
    pid_file = tmp_path / "grandchild.pid"
    child = start("parent", [sys.executable, "-c", _grandchild_script(pid_file, parent_exits=parent_exits)])
    _until(pid_file.exists, "the grandchild's pid")
    grandchild = int(pid_file.read_text())
    assert os.getpgid(grandchild) == child.pid
    if parent_exits:
        _until(lambda: not child.running(), "the parent's exit")
    assert child.stop(grace_s=0.5) is True
    assert not alive(grandchild)


def test_wait_ready_fails_early_with_the_log_tail_when_the_child_exits(tmp_path: Path) -> None:
    log = tmp_path / "crash.log"
    script = "print('bad config: JOBQ_X'); raise SystemExit(3)"
    child = start("crash", [sys.executable, "-c", script], output=log)
    started = time.monotonic()
    with pytest.raises(ChildExited, match=r"crash: the process .* exited while starting") as info:
        child.wait_ready(lambda: False, timeout_s=120)
    assert "bad config: JOBQ_X" in str(info.value)
    assert info.value.returncode == 3
    assert time.monotonic() - started < 60  # failed on the exit, not at the deadline


def test_wait_ready_names_what_timed_out(tmp_path: Path) -> None:
    with Children(grace_s=5) as children:
        child = children.start("sleeper", [sys.executable, "-c", SLEEPS], output=tmp_path / "s.log")
        with pytest.raises(StackError, match="the sleeper's port: not ready after 0s"):
            child.wait_ready(lambda: False, timeout_s=0.2, what="the sleeper's port")


def test_wait_ready_with_a_real_tcp_probe(tmp_path: Path) -> None:
    port = free_port()
    go = tmp_path / "go"
    os.mkfifo(go)
    server = (  # listens only once the probe has failed and opened the fifo: the probe must really wait
        f"import signal, socket; open({str(go)!r}).read()\n"
        f"s = socket.socket(); s.bind(('127.0.0.1', {port})); s.listen()\n"
        f"{SLEEPS}\n"
    )
    listening = tcp_open("127.0.0.1", port)
    failed: list[bool] = []

    def probe() -> bool:
        with contextlib.suppress(OSError):  # refused: not listening yet
            if listening():
                return True
        failed.append(True)
        with contextlib.suppress(OSError):  # ENXIO until the child opened its end
            os.close(os.open(go, os.O_WRONLY | os.O_NONBLOCK))
        return False

    with Children(grace_s=5) as children:
        child = children.start("listener", [sys.executable, "-c", server])
        child.wait_ready(probe, timeout_s=60)
        assert failed, "the probe was asked again after it failed"
        with socket.create_connection(("127.0.0.1", port), timeout=5):
            pass
    assert not child.running()


async def test_the_async_wait_fails_early_with_the_log_tail(tmp_path: Path) -> None:
    log = tmp_path / "quitter.log"
    child = start("quitter", [sys.executable, "-c", "print('no port'); raise SystemExit(1)"], output=log)
    with pytest.raises(ChildExited, match="no port") as info:
        await child.wait_ready_async(lambda: False, timeout_s=120)
    assert info.value.returncode == 1


async def test_the_async_wait_returns_once_the_probe_answers() -> None:
    port = free_port()
    server = f"import socket, time; s = socket.socket(); s.bind(('127.0.0.1', {port})); s.listen(); {SLEEPS}"
    with Children(grace_s=5) as children:
        child = children.start("listener", [sys.executable, "-c", server])
        await child.wait_ready_async(tcp_open("127.0.0.1", port), timeout_s=60)
        assert child.running()


def test_children_stop_together_and_name_the_killed(tmp_path: Path) -> None:
    log = tmp_path / "stubborn.log"
    with Children(grace_s=0.5) as children:
        children.start("polite", [sys.executable, "-c", SLEEPS])
        children.start("stubborn", [sys.executable, "-c", IGNORES_TERM], output=log)
        _until(_says(log, "ready"), "the stubborn child's SIGTERM handler")
        assert children.stop() == ["stubborn"]
    assert sorted(children.dead()) == ["polite (exit -15)", "stubborn (exit -9)"]


def test_a_child_that_exits_1_is_started_again_and_one_that_exits_otherwise_is_not(tmp_path: Path) -> None:
    """Status 1 is a server that did not answer (a supervisor tries again): ``revive`` starts the child
    again with its argv, environment and log, up to RESTARTS times; status 2 (a refusal) stays dead."""
    runs = tmp_path / "runs.log"
    exits_1 = "import os, sys; print(os.environ['WHO'], flush=True); sys.exit(1)"
    with Children(grace_s=5) as children:
        children.start("flaky", [sys.executable, "-c", exits_1], output=runs, env={**os.environ, "WHO": "f"})
        refused = children.start("refused", [sys.executable, "-c", "raise SystemExit(2)"])
        assert refused.wait(30) == 2
        for _ in range(RESTARTS):
            assert children.members[0].wait(30) == 1
            assert children.revive() == ["flaky"]
            assert children.members[1] is refused
        assert children.members[0].wait(30) == 1
        assert children.revive() == []
        assert sorted(children.dead()) == ["flaky (exit 1)", "refused (exit 2)"]
    assert runs.read_text() == "f\n" * (RESTARTS + 1)


def test_python_m_runs_this_interpreter() -> None:
    assert python_m("jobq", "worker", "--app", "x") == [sys.executable, "-m", "jobq", "worker", "--app", "x"]
