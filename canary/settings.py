"""The canary's settings (``JOBQ_CANARY_*``)."""

from __future__ import annotations

from pydantic import Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict

from jqcore.settings import CommaList

__all__ = ["CanarySettings"]


class CanarySettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="JOBQ_CANARY_", extra="ignore", populate_by_name=True)

    gateways: CommaList = Field(default_factory=lambda: ["http://127.0.0.1:28080"])
    """Gateway URLs, comma-separated; ``url@az`` names a gateway's zone."""
    token: SecretStr = SecretStr("")
    az: str = ""
    interval_s: float = Field(60.0, gt=0)
    late_after_s: float = Field(30.0, gt=0)
    """A heartbeat not executed this long after it was sent flags its partition."""
