"""The Redis execution engine: the only code that touches queue keys (see ``docs/engine.md``).

This package's modules are its own: other packages import from ``jqcore.state`` only (an import-linter
``protected`` contract in ``pyproject.toml`` holds that), and get exactly what is listed here.
"""

from jqcore.state.codes import (
    Code,
    FenceRejected,
    FilterInvalid,
    JobNotFound,
    QueueConfigInvalid,
    RedisMemoryFull,
    StaleLease,
    SwitchInvalid,
    SwitchNotFound,
    redis_errors,
    refused_by_script,
)
from jqcore.state.codes import check as check_code
from jqcore.state.engine import Engine
from jqcore.state.graphmodels import GraphInfo, NodeInfo, NodeInputs, ParentOutcome
from jqcore.state.graphs import REPAIR_AFTER_MS, GraphSignals
from jqcore.state.memory import QueueMemory
from jqcore.state.models import (
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
from jqcore.state.replication import ReplicaWait, recording_writes
from jqcore.state.switchrules import ACTIONS as SWITCH_ACTIONS
from jqcore.state.switchrules import Switch
from jqcore.state.tails import TAIL_ID_PREFIX

__all__ = [
    "REPAIR_AFTER_MS",
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
    "RedisMemoryFull",
    "Released",
    "ReplicaWait",
    "Settle",
    "StaleLease",
    "StreamEvent",
    "Switch",
    "SwitchInvalid",
    "SwitchNotFound",
    "check_code",
    "recording_writes",
    "redis_errors",
    "refused_by_script",
]
