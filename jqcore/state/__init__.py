"""The Redis execution engine: the only code that touches queue keys (see ``docs/engine.md``)."""

from jqcore.state.engine import Engine
from jqcore.state.models import ClaimedJob, EnqueueOutcome, JobInfo, QueueConfig

__all__ = ["ClaimedJob", "Engine", "EnqueueOutcome", "JobInfo", "QueueConfig"]
