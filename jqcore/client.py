"""Deprecated: the app-side HTTP client moved to :mod:`jqruntime.client` (what a running process stands
on, not the kernel). This module re-exports its public names for this release only and warns once, when
first imported; it goes in the next release. Nothing in jobq imports it."""

from __future__ import annotations

import warnings

from jqruntime.client import ApiRefused, Gateway, GatewayUnavailable, JobqClient, parse_retry_after

__all__ = ["ApiRefused", "Gateway", "GatewayUnavailable", "JobqClient", "parse_retry_after"]

warnings.warn(
    "jqcore.client moved to jqruntime.client; use `jobq`'s front door", DeprecationWarning, stacklevel=2
)
