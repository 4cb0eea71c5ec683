"""Connecting to Consul: the one place that turns :class:`~jqcore.settings.servers.ConsulSettings` into a
py-consul client (asyncio or sync: scheme, CA, client certificate, token), and closing one."""

from __future__ import annotations

import consul
import consul.aio

from jqcore.settings.servers import ConsulSettings

__all__ = ["close_consul", "consul_client", "consul_sync_client"]


def consul_client(settings: ConsulSettings) -> consul.aio.Consul:
    """An asyncio client (``consul.aio``) for ``settings``."""
    kwargs = settings.client_kwargs()
    client = consul.aio.Consul(**kwargs)
    client.token = kwargs["token"]  # py-consul lets CONSUL_HTTP_TOKEN win over the token it is given
    return client


def consul_sync_client(settings: ConsulSettings) -> consul.Consul:
    """A synchronous client (``consul.Consul``, over requests) for ``settings``."""
    kwargs = settings.client_kwargs()
    client = consul.Consul(**kwargs)
    client.token = kwargs["token"]
    return client


async def close_consul(client: consul.aio.Consul | None) -> None:
    """Close ``client``'s HTTP connections (``None``: nothing to close). Every service closes its Consul
    client here, through py-consul's public ``close()``, never its private aiohttp session."""
    if client is not None:
        await client.close()
