"""The backend's ``OPTIONS`` (``TASKS = {"default": {"BACKEND": ..., "OPTIONS": {...}}}``), validated.

They come from Django's settings, not the environment, so this is a pydantic model rather than a
settings class; a bad value stops Django at start-up (``InvalidTaskBackend``) naming the field.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from jqcore.envelope_rules import check_name
from jqruntime.client import Gateway

__all__ = ["BackendOptions", "GatewayOption"]


class GatewayOption(BaseModel):
    model_config = ConfigDict(extra="forbid")

    url: str
    az: str = ""


class BackendOptions(BaseModel):
    """What the jobq backend needs: where the gateways are, the token, how Django's names map onto jobq's."""

    model_config = ConfigDict(extra="forbid")

    gateways: list[str | GatewayOption] = Field(min_length=1)
    """Gateway base URLs (``"http://gw:28080"``) or ``{"url": ..., "az": ...}``."""
    token: str = Field(min_length=1)
    """A gateway token allowed to enqueue and read the tasks' queues."""
    az: str = ""
    """This application's availability zone (its own zone's gateways are tried first)."""
    queues: dict[str, str] = Field(default_factory=dict)
    """Django ``queue_name`` → jobq queue; a name not listed maps to ``queue_prefix + queue_name``."""
    queue_prefix: str = ""
    """Put before a Django queue name that ``queues`` does not map."""
    priority_step_ms: int = Field(60_000, ge=0)
    """jobq ranks jobs by deadline (lower first, default: the enqueue time); a task of Django priority
    ``p`` is ranked as if it had been enqueued ``p * priority_step_ms`` earlier (later when negative)."""
    max_attempts: int | None = Field(1, ge=1)
    """Attempts per task (Django's tasks have no retries: 1); ``None`` leaves it to the queue's default."""
    deadline_s: float = Field(30.0, gt=0)
    """How long one enqueue or read may take, retries over the gateways included."""

    def gateway_list(self) -> list[Gateway]:
        return [Gateway(g) if isinstance(g, str) else Gateway(g.url, g.az) for g in self.gateways]

    def jobq_queue(self, queue_name: str) -> str:
        """The jobq queue of a Django queue name; ``ValueError`` when that is no valid jobq queue."""
        queue = self.queues.get(queue_name, self.queue_prefix + queue_name)
        problem = check_name("queue", queue)
        if problem:
            raise ValueError(f"Django queue {queue_name!r} maps to jobq queue {queue!r}, which {problem}")
        return queue
