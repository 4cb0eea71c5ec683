"""Commands packed by hiredis (jqengine.redisconn) are byte for byte what redis-py's own packer sends; a
connection tells Redis its library's version without reading the distribution's metadata."""

from __future__ import annotations

from typing import Any

import pytest
import redis.utils
from redis.asyncio.connection import Connection
from redis.exceptions import DataError

from jqcore.settings.servers import RedisSettings
from jqengine.redisconn import FastConnection, connect, connect_sync, pack_command

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


def test_a_connection_names_redis_py_s_version_without_reading_its_metadata(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """redis-py reads its version from the installed distribution's metadata for each new connection
    unless told it (``CLIENT SETINFO lib-ver``): ~2.5 ms of CPU a connection, two before a worker's first
    claim. Every client :func:`connect` and :func:`connect_sync` make is told it once."""

    def read() -> str:
        raise AssertionError("the distribution's metadata read for a connection")

    monkeypatch.setattr(redis.utils, "get_lib_version", read)
    settings = RedisSettings(url="redis://127.0.0.1:1/0")
    made = [
        connect(settings).connection_pool.make_connection(),  # type: ignore[union-attr]
        connect(settings, wait_s=1.0).connection_pool.make_connection(),  # type: ignore[union-attr]
        connect_sync(settings).connection_pool.make_connection(),  # type: ignore[union-attr]
    ]
    for connection in made:
        assert connection.driver_info is not None
        assert connection.driver_info.lib_version == redis.__version__
