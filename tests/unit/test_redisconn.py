"""Commands packed by hiredis (jqengine.redisconn) are byte for byte what redis-py's own packer sends."""

from __future__ import annotations

from typing import Any

import pytest
from redis.asyncio.connection import Connection
from redis.exceptions import DataError

from jqcore.settings.servers import RedisSettings
from jqengine.redisconn import FastConnection, connect, pack_command

CASES: list[tuple[Any, ...]] = [
    ("SET", "k", "v"),
    ("CONFIG GET", "maxmemory"),
    (b"GET", b"x"),
    (b"CLIENT KILL", b"ID", 7),
    ("EVALSHA", "a" * 40, 2, "jobq:{q}:ready", "jobq:{q}:wake", 1_764_000_000_000, -3, 0.1 + 0.2, 1e20),
    ("HSET", "k", "f", b"\x00\xff\r\n", bytearray(b"ab"), memoryview(b"cd"), "é", ""),
    ("RPUSH", "k", b"x" * 100_000),
]


@pytest.mark.parametrize("args", CASES)
def test_hiredis_packing_equals_redis_py(args: tuple[Any, ...]) -> None:
    assert b"".join(pack_command(*args)) == b"".join(Connection().pack_command(*args))


def test_unpackable_values_are_a_data_error() -> None:
    with pytest.raises(DataError):
        pack_command("SET", "k", object())


def test_connect_uses_the_fast_connection() -> None:
    client = connect(RedisSettings(url="redis://127.0.0.1:1/0"))
    assert client.connection_pool.connection_class is FastConnection  # type: ignore[union-attr]
