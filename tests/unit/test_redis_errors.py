"""How Redis's refusals map to jobq errors: a server refusing every write for a while is retriable (the
relay waits), an answer about the job or script itself is not."""

from __future__ import annotations

import pytest
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ResponseError

from jqcore.errors import BackendUnavailable
from jqcore.state.codes import RedisMemoryFull, redis_errors


@pytest.mark.parametrize(
    "message",
    [
        "MISCONF Errors writing to the AOF file: No space left on device",
        "READONLY You can't write against a read only replica.",
        "LOADING Redis is loading the dataset in memory",
        "BUSY Redis is busy running a script.",
        "CLUSTERDOWN The cluster is down",
        "TRYAGAIN Multiple keys request during rehashing of slot",
    ],
)
async def test_a_server_refusing_all_writes_is_retriable(message: str) -> None:
    with pytest.raises(BackendUnavailable) as info:
        async with redis_errors("enqueue_batch"):
            raise ResponseError(message)
    assert info.value.retriable
    assert "enqueue_batch" in str(info.value)


async def test_memory_full_and_unreachable_are_retriable() -> None:
    with pytest.raises(RedisMemoryFull):
        async with redis_errors("claim"):
            raise ResponseError("OOM command not allowed when used memory > 'maxmemory'.")
    with pytest.raises(BackendUnavailable):
        async with redis_errors("claim"):
            raise RedisConnectionError("Connection refused")


async def test_a_script_error_stays_what_it_is() -> None:
    with pytest.raises(ResponseError):
        async with redis_errors("claim"):
            raise ResponseError("ERR user_script:12: attempt to compare nil with number")
