"""Connecting to Consul: one async client from :class:`~jqcore.settings.ConsulSettings`, and closing it."""

from __future__ import annotations

import consul.aio

from jqcore.settings import ConsulSettings

__all__ = ["close_consul", "consul_client"]


def consul_client(settings: ConsulSettings) -> consul.aio.Consul:
    token = settings.token.get_secret_value() if settings.token else None
    return consul.aio.Consul(host=settings.host, port=settings.port, scheme=settings.scheme, token=token)


async def close_consul(client: consul.aio.Consul | None) -> None:
    """Close ``client``'s HTTP connections (``None``: nothing to close). Every service closes its Consul
    client here, through py-consul's public ``close()``, never its private aiohttp session."""
    if client is not None:
        await client.close()
