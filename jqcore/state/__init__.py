"""The Redis execution engine: the only code that touches queue keys (see ``docs/engine.md``)."""

from jqcore.state.engine import Engine
from jqcore.state.models import (
    CancelOutcome,
    CancelResult,
    ClaimedJob,
    EnqueueOutcome,
    Failed,
    Forgotten,
    HandedBack,
    JobInfo,
    NotExtended,
    Promoted,
    QueueConfig,
    QueueDepth,
    Released,
)

__all__ = [
    "CancelOutcome",
    "CancelResult",
    "ClaimedJob",
    "Engine",
    "EnqueueOutcome",
    "Failed",
    "Forgotten",
    "HandedBack",
    "JobInfo",
    "NotExtended",
    "Promoted",
    "QueueConfig",
    "QueueDepth",
    "Released",
]
