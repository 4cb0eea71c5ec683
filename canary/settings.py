"""The canary's settings (``JOBQ_CANARY_*``)."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field, SecretStr, field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

__all__ = ["CanarySettings"]


class CanarySettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="JOBQ_CANARY_", extra="ignore", populate_by_name=True)

    gateways: Annotated[list[str], NoDecode] = Field(default_factory=lambda: ["http://127.0.0.1:28080"])
    """Gateway URLs, comma-separated; ``url@az`` names a gateway's zone."""
    token: SecretStr = SecretStr("")
    az: str = ""
    interval_s: float = Field(60.0, gt=0)
    late_after_s: float = Field(30.0, gt=0)
    """A heartbeat not executed this long after it was sent flags its partition."""

    @field_validator("gateways", mode="before")
    @classmethod
    def _split(cls, v: object) -> object:
        if isinstance(v, str):
            return [t.strip() for t in v.split(",") if t.strip()]
        return v
