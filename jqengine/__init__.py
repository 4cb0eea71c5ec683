"""The Redis execution engine: the only code that touches queue keys (see ``docs/engine.md``).

This package's modules are its own: other packages import from ``jqengine`` only (an import-linter
``protected`` contract in ``pyproject.toml`` holds that), and get exactly what is listed here — the engine,
the values it returns, its errors, and the Redis connection (:func:`connect`, :data:`RedisClient`,
:func:`memory_info`, :data:`POOL_HOLDER`, from :mod:`jqengine.redisconn`) every Redis user shares, and the
mapping of Redis failures (:func:`redis_errors`) for the stores that keep their keys beside the queues.

The storage seam of the house: it stands on the kernel (:mod:`jqcore`) and redis-py only — no web server,
Kafka or Consul client, and nothing of a running process (:mod:`jqruntime` stands on it, never the other
way round).
"""

import jqengine._redis  # noqa: F401  (first: redis-py without what it imports for nothing)
from jqengine.codes import (
    Code,
    FenceRejected,
    FilterInvalid,
    JobNotFound,
    QueueConfigInvalid,
    RedisMemoryFull,
    ResultTooLarge,
    StaleLease,
    SwitchesFull,
    SwitchInvalid,
    SwitchNotFound,
    redis_errors,
    refused_by_script,
)
from jqengine.codes import check as check_code
from jqengine.engine import Engine
from jqengine.graphmodels import GraphInfo, NodeInfo, NodeInputs, ParentOutcome
from jqengine.graphs import ENDED_GRAPHS_KEPT, REPAIR_AFTER_MS, GraphSignals
from jqengine.jobs import MAX_RESULT_BYTES
from jqengine.memory import QueueMemory, check_bounds
from jqengine.models import (
    CancelOutcome,
    CancelResult,
    ClaimedJob,
    EnqueueOutcome,
    EnqueueResult,
    Failed,
    Forgotten,
    HandedBack,
    JobInfo,
    JobLease,
    NotExtended,
    Promoted,
    QueueConfig,
    QueueDepth,
    Released,
    Settle,
    StreamEvent,
)
from jqengine.redisconn import POOL_HOLDER, RedisClient, connect, memory_info, text
from jqengine.replication import ReplicaWait, recording_writes
from jqengine.signals import QueueSignals
from jqengine.switchrules import ACTIONS as SWITCH_ACTIONS
from jqengine.switchrules import Switch
from jqengine.tails import TAIL_ID_PREFIX
from jqengine.timers import STEP_HORIZON_MS

__all__ = [
    "ENDED_GRAPHS_KEPT",
    "MAX_RESULT_BYTES",
    "POOL_HOLDER",
    "REPAIR_AFTER_MS",
    "STEP_HORIZON_MS",
    "SWITCH_ACTIONS",
    "TAIL_ID_PREFIX",
    "CancelOutcome",
    "CancelResult",
    "ClaimedJob",
    "Code",
    "Engine",
    "EnqueueOutcome",
    "EnqueueResult",
    "Failed",
    "FenceRejected",
    "FilterInvalid",
    "Forgotten",
    "GraphInfo",
    "GraphSignals",
    "HandedBack",
    "JobInfo",
    "JobLease",
    "JobNotFound",
    "NodeInfo",
    "NodeInputs",
    "NotExtended",
    "ParentOutcome",
    "Promoted",
    "QueueConfig",
    "QueueConfigInvalid",
    "QueueDepth",
    "QueueMemory",
    "QueueSignals",
    "RedisClient",
    "RedisMemoryFull",
    "Released",
    "ReplicaWait",
    "ResultTooLarge",
    "Settle",
    "StaleLease",
    "StreamEvent",
    "Switch",
    "SwitchInvalid",
    "SwitchNotFound",
    "SwitchesFull",
    "check_bounds",
    "check_code",
    "connect",
    "memory_info",
    "recording_writes",
    "redis_errors",
    "refused_by_script",
    "text",
]
