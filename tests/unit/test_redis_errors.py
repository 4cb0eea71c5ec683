"""How Redis's refusals map to jobq errors: a server refusing every write for a while is retriable (the
relay waits), an answer about the job or script itself is not; which errors make the relay set a
queue's jobs aside, and which make it hold the batch."""

from __future__ import annotations

import pytest
from redis.exceptions import (
    ClusterDownError,
    MasterDownError,
    NoPermissionError,
    ReadOnlyError,
    ResponseError,
    TryAgainError,
)
from redis.exceptions import ConnectionError as RedisConnectionError

from jqcore.errors import BackendUnavailable
from jqengine.codes import RedisMemoryFull, redis_errors, refused_by_script
from jqrelay.batch import holds_batch


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


@pytest.mark.parametrize(
    "error",
    [
        ReadOnlyError("You can't write against a read only replica."),
        TryAgainError("Multiple keys request during rehashing of slot"),
        ClusterDownError("The cluster is down"),
        MasterDownError("Link with MASTER is down and replica-serve-stale-data is set to 'no'."),
        ReadOnlyError("Command # 1 (SADD jobq:queues q) of pipeline caused error: You can't write."),
    ],
    ids=["readonly", "tryagain", "clusterdown", "masterdown", "readonly-in-a-pipeline"],
)
async def test_a_server_state_as_redis_py_names_it_is_retriable(error: ResponseError) -> None:
    """redis-py gives these replies classes of their own and strips their prefix from the text."""
    with pytest.raises(BackendUnavailable):
        async with redis_errors("enqueue_batch"):
            raise error


SCRIPT = "script: 15a2ab925a6c12468a90ee82f4f4bf220b6c19ba, on @user_script:1."
FUNCTION = "script: jobq_0123456789abcdef_claim, on @user_function:1130."
"""What Redis 7 ends a failed function's error with (``FCALL``; ``SCRIPT``: ``EVALSHA``'s)."""


@pytest.mark.parametrize(
    ("error", "refused"),
    [
        (ResponseError(f"WRONGTYPE Operation against a key holding the wrong kind of value {SCRIPT}"), True),
        (
            ResponseError(f"user_script:1: Expected value but found invalid token at character 1 {SCRIPT}"),
            True,
        ),
        (ResponseError(f"ERR value is not an integer or out of range {SCRIPT}"), True),
        (
            ResponseError(f"WRONGTYPE Operation against a key holding the wrong kind of value {FUNCTION}"),
            True,
        ),
        (ResponseError(f"ERR user_function:1130: attempt to compare nil with number {FUNCTION}"), True),
        (ResponseError("WRONGTYPE Operation against a key holding the wrong kind of value"), False),
        (NoPermissionError("this user has no permissions to run the 'evalsha' command"), False),
        (NoPermissionError(f"this user has no permissions to access one of the keys {SCRIPT}"), False),
        (
            ResponseError(
                "Command # 2 (HGETALL jobq:switches) of pipeline caused error: ('ERR unknown command',)"
            ),
            False,
        ),
        (ValueError("a bug met by one job's encoding"), False),
    ],
    ids=[
        "wrongtype-in-a-script",
        "lua-error",
        "command-error-in-a-script",
        "wrongtype-in-a-function",
        "lua-error-in-a-function",
        "wrongtype-outside-a-script",
        "acl-command",
        "acl-keys-in-a-script",
        "unknown-in-a-pipeline",
        "not-redis",
    ],
)
def test_only_a_script_failing_on_its_keys_refuses_them(error: Exception, refused: bool) -> None:
    assert refused_by_script(error) is refused


@pytest.mark.parametrize(
    ("error", "held"),
    [
        (ResponseError(f"WRONGTYPE Operation against a key holding the wrong kind of value {SCRIPT}"), False),
        (NoPermissionError("this user has no permissions to run the 'evalsha' command"), True),
        (ResponseError("Command # 1 (SADD jobq:queues q) of pipeline caused error: ('ERR odd',)"), True),
        (BackendUnavailable("Redis unreachable"), True),
        (ValueError("a bug met by one job's encoding"), False),
    ],
    ids=["queue-refuses", "acl", "unexplained", "unreachable", "this-process"],
)
def test_the_relay_holds_a_batch_for_any_redis_error_but_a_queue_refusing_it(
    error: Exception, held: bool
) -> None:
    """Set aside (``<topic>.retry``) only what a queue's own data refused, or what this process failed
    on; hold (try again, for as long as it takes) for what says nothing about the jobs."""
    assert holds_batch(error) is held
