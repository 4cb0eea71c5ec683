"""Which loopback ports a stack's servers listen on, and who holds a port that is taken.

* The default stack keeps its documented ports (:data:`DEFAULT_PORTS`).
* Every other named stack gets a **block** of :data:`BLOCK_SIZE` ports of its own between
  :data:`BLOCK_FIRST` and :data:`BLOCK_LAST` (below the default stack's ports and below Linux's ephemeral
  range, so an outgoing connection never squats on it): the first block, counting from one derived from the
  name, whose ports are free now and recorded by no other stack's ``state.json``. The stack records it, so
  it keeps its ports across restarts.
* A stack with no fixed ports (a test session's, a fault scenario's own) and a test's own server take
  **loose** ports (:func:`loose_port`): free now, drawn from ``[LOOSE_FIRST, LOOSE_LAST)`` — never from
  Linux's ephemeral range. A port the kernel handed out by binding port 0 lies in that range, where the
  source port of any outgoing connection (or of a client that connects to the port itself while its server
  is still starting: TCP's simultaneous open) can take it between the draw and the server's bind.

Inside a block each kind of server has its offsets (:data:`BLOCK_OFFSETS`); a Redis Cluster node's bus
listens on ``port + 10000``, which must be free as well.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import socket
import zlib
from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "BLOCK_FIRST",
    "BLOCK_LAST",
    "BLOCK_OFFSETS",
    "BLOCK_SIZE",
    "CLUSTER_BUS_OFFSET",
    "DEFAULT_PORTS",
    "LOOSE_FIRST",
    "LOOSE_LAST",
    "Holder",
    "block_port",
    "choose_block",
    "first_taken",
    "is_free",
    "port_holder",
    "recorded_ports",
]

DEFAULT_PORTS = {"kafka": 29092, "consul": 28500, "redis": 26379, "redis_cluster": 27001}
"""The default stack's first port per kind (brokers count up by two from Kafka's: listener, controller)."""

BLOCK_SIZE = 32
BLOCK_FIRST = 20000
BLOCK_LAST = 26000
"""Named stacks' blocks lie in ``[BLOCK_FIRST, BLOCK_LAST)``: 187 blocks of 32 ports."""

BLOCK_OFFSETS = {"kafka": 0, "consul": 12, "redis": 16, "redis_cluster": 20}
"""Within a block: brokers at 0..11 (two ports each, up to 5 brokers and spare), Consul's four ports at
12..15, Redis at 16, Redis Cluster nodes at 20..31 (up to 12 nodes)."""

CLUSTER_BUS_OFFSET = 10000
"""A Redis Cluster node's bus port is its port plus this."""


def block_port(block: int, kind: str, offset: int) -> int:
    """The port of server ``kind``'s ``offset``-th port in block number ``block``."""
    if offset >= _room(kind):
        raise ValueError(f"a block holds {_room(kind)} {kind} ports, not {offset + 1}")
    return BLOCK_FIRST + block * BLOCK_SIZE + BLOCK_OFFSETS[kind] + offset


def _room(kind: str) -> int:
    starts = [*sorted(BLOCK_OFFSETS.values()), BLOCK_SIZE]
    start = BLOCK_OFFSETS[kind]
    return starts[starts.index(start) + 1] - start


def _blocks() -> int:
    return (BLOCK_LAST - BLOCK_FIRST) // BLOCK_SIZE


def choose_block(
    name: str, ports_of: Iterable[int], taken: set[int], free: Callable[[int], bool] | None = None
) -> int:
    """The block for stack ``name``: counting from ``crc32(name)``, the first whose ports (``ports_of``:
    the offsets from the block's start the stack needs, cluster bus ports included) are neither in
    ``taken`` (recorded by other stacks) nor bound now (``free``: a port -> bool check, :func:`is_free` by
    default). Raises ``OSError`` when every block is busy."""
    check = is_free if free is None else free
    offsets = sorted(set(ports_of))
    start = zlib.crc32(name.encode()) % _blocks()
    for i in range(_blocks()):
        block = (start + i) % _blocks()
        base = BLOCK_FIRST + block * BLOCK_SIZE
        ports = [base + off for off in offsets]
        if not any(p in taken for p in ports) and all(check(p) for p in ports):
            return block
    raise OSError(f"no free block of {BLOCK_SIZE} loopback ports in {BLOCK_FIRST}-{BLOCK_LAST}")


LOOSE_FIRST = 10000
LOOSE_LAST = 20000
"""Loose ports lie in ``[LOOSE_FIRST, LOOSE_LAST)``: below the named stacks' blocks and the ephemeral range.
A pair's second port (a Redis Cluster node's bus, ``port + 10000``) lands in ``[20000, 30000)``."""

EPHEMERAL = Path("/proc/sys/net/ipv4/ip_local_port_range")


def ephemeral_range(path: Path = EPHEMERAL) -> range:
    """The ports Linux picks outgoing connections' source ports from (32768–60999 unless configured)."""
    try:
        low, high = (int(x) for x in path.read_text().split())
    except (OSError, ValueError):
        low, high = 32768, 60999
    return range(low, high + 1)


def loose_port(*, pair_offset: int | None = None, avoid: Collection[int] = ()) -> int:
    """A loopback port nothing listens on now, outside the ephemeral range and the default stack's ports,
    not in ``avoid``; with ``pair_offset``, ``port + pair_offset`` is such a port as well."""
    ephemeral = ephemeral_range()
    reserved = {p + i for p in DEFAULT_PORTS.values() for i in range(BLOCK_SIZE)}

    def usable(port: int) -> bool:
        return port not in ephemeral and port not in reserved and port not in avoid and is_free(port)

    candidates = list(range(LOOSE_FIRST, LOOSE_LAST))
    random.shuffle(candidates)
    for port in candidates:
        if usable(port) and (pair_offset is None or usable(port + pair_offset)):
            return port
    raise OSError(f"no free loopback port in {LOOSE_FIRST}-{LOOSE_LAST} outside the ephemeral range")


def recorded_ports(stacks_root: Path, *, besides: str) -> set[int]:
    """Every port recorded in the ``state.json`` of a stack under ``stacks_root`` other than ``besides``:
    a stopped stack still owns its ports."""
    out: set[int] = set()
    if not stacks_root.is_dir():
        return out
    for state in stacks_root.glob("*/state.json"):
        if state.parent.name == besides:
            continue
        try:
            servers = json.loads(state.read_text()).get("servers", [])
        except (OSError, ValueError):
            continue
        for s in servers:
            out.add(int(s["port"]))
            out.update(int(p) for p in s.get("extra_ports", {}).values())
            if s.get("kind") == "redis-cluster":
                out.add(int(s["port"]) + CLUSTER_BUS_OFFSET)
    return out


def is_free(port: int) -> bool:
    """Whether a server could listen on loopback ``port`` now (bound with ``SO_REUSEADDR`` as the servers
    do, so connections lingering in TIME_WAIT do not count)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


@dataclass(frozen=True)
class Holder:
    """The process listening on a port, as far as ``/proc`` tells."""

    pid: int
    command: str

    def __str__(self) -> str:
        return f"pid {self.pid} ({self.command})"


def port_holder(port: int, proc: Path = Path("/proc")) -> Holder | None:
    """The process listening on TCP ``port`` (Linux ``/proc``; ``None`` when unknown or elsewhere)."""
    inodes = _listening_inodes(port, proc)
    if not inodes:
        return None
    for pid_dir in proc.iterdir():
        if not pid_dir.name.isdigit():
            continue
        try:
            fds = list((pid_dir / "fd").iterdir())
        except OSError:
            continue
        for fd in fds:
            try:
                target = os.readlink(fd)
            except OSError:
                continue
            if target.startswith("socket:[") and target[8:-1] in inodes:
                return Holder(int(pid_dir.name), _command(pid_dir))
    return None


def _listening_inodes(port: int, proc: Path) -> set[str]:
    inodes: set[str] = set()
    for table in ("tcp", "tcp6"):
        try:
            lines = (proc / "net" / table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            cols = line.split()
            local, state, inode = cols[1], cols[3], cols[9]
            if state == "0A" and int(local.rsplit(":", 1)[1], 16) == port:  # 0A: LISTEN
                inodes.add(inode)
    return inodes


def _command(pid_dir: Path) -> str:
    try:
        argv = (pid_dir / "cmdline").read_bytes().split(b"\0")
    except OSError:
        return "?"
    words = [a.decode(errors="replace") for a in argv if a]
    text = " ".join(words)
    return text if len(text) <= 160 else text[:157] + "..."


def first_taken(ports: dict[str, int], stacks_root: Path, stack: str, *, fixed_default: bool) -> str | None:
    """The first of ``ports`` (label → port) that is taken, said with its holder and what to do (``None``:
    all free). ``fixed_default``: the ports are the default stack's, which cannot move."""
    for label, port in ports.items():
        if is_free(port):
            continue
        what = f"port {port}" + (f" ({label})" if label else "")
        if fixed_default:
            hint = (
                "The default stack's ports are fixed: stop that process, or run a stack of your own "
                "beside it (`jobq stack up --name NAME`), which gets ports of its own."
            )
        else:
            hint = (
                "Stop that process, or plan this stack's ports anew "
                f"(`jobq stack down --name {stack} --purge`, then `up`)."
            )
        return f"{what} is taken by {describe_holder(port, stacks_root)}. {hint}"
    return None


def describe_holder(port: int, stacks_root: Path) -> str:
    """Who listens on ``port``: a server of a jobq stack by name, else the process, else "a process"."""
    holder = port_holder(port)
    if holder is None:
        return "a process this user cannot see"
    for state in stacks_root.glob("*/state.json"):
        with contextlib.suppress(OSError, ValueError, KeyError):
            for s in json.loads(state.read_text())["servers"]:
                if s.get("pid") == holder.pid:
                    return f"{s['name']} of stack {state.parent.name!r} (pid {holder.pid})"
    return str(holder)
