"""Connecting to Consul: one async client from :class:`~jqcore.settings.ConsulSettings`."""

from __future__ import annotations

import consul.aio

from jqcore.settings import ConsulSettings

__all__ = ["consul_client"]


def consul_client(settings: ConsulSettings) -> consul.aio.Consul:
    token = settings.token.get_secret_value() if settings.token else None
    return consul.aio.Consul(host=settings.host, port=settings.port, scheme=settings.scheme, token=token)
