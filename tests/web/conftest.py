"""The dashboard on the session stack: ``dash`` serves ``jobq web`` in this process, reading this test's own
topic, Consul prefix and queues ``<prefix>*``; :class:`Dash` talks to it as a browser (cookie-less:
``Authorization`` header, or the cookie after :meth:`Dash.login`) or a script (``Accept: application/json``:
every page answers its context as JSON)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import pytest
from pydantic import SecretStr

from jqcore.routing import Route, RoutingSettings
from jqcore.settings.kafka import KafkaSettings
from jqcore.settings.pipeline import CronSettings, HistorySettings, RelayKeys
from jqcore.settings.servers import ConsulSettings, RedisSettings
from jqstack.manager import Endpoints
from jqweb.main import WebService
from jqweb.overview import Sources
from jqweb.settings import WebSettings

READ = "viewer-token-0123"
ADMIN = "admin-token-4567"
TOKENS = {"read": READ, "admin": ADMIN, None: ""}


@dataclass
class Reply:
    status: int
    headers: Mapping[str, str]
    text: str
    url: str = ""

    def json(self) -> Any:
        import orjson

        return orjson.loads(self.text)

    @property
    def code(self) -> str | None:
        """The machine-readable reason of an error (JSON body or the page's ``X-Jobq-Error``)."""
        if self.headers.get("Content-Type", "").startswith("application/json"):
            err = self.json().get("error")
            return err.get("code") if isinstance(err, dict) else None
        return self.headers.get("X-Jobq-Error")


@dataclass
class Dash:
    url: str
    session: aiohttp.ClientSession
    sources: Sources
    prefix: str
    topic: str
    kv_prefix: str
    extra: dict[str, Any] = field(default_factory=dict)

    def _headers(self, token: str | None, as_json: bool, site: str | None) -> dict[str, str]:
        h = {"Accept": "application/json" if as_json else "text/html"}
        if token:
            h["Authorization"] = f"Bearer {TOKENS[token]}"
        if site:
            h["Sec-Fetch-Site"] = site
        return h

    async def get(
        self, path: str, *, token: str | None = "read", as_json: bool = True, **params: Any
    ) -> Reply:
        async with self.session.get(
            self.url + path, params=params, headers=self._headers(token, as_json, None), allow_redirects=False
        ) as r:
            return Reply(r.status, r.headers, await r.text(), str(r.url))

    async def post(
        self,
        path: str,
        data: Mapping[str, Any] | None = None,
        *,
        token: str | None = "admin",
        as_json: bool = True,
        site: str | None = "same-origin",
        headers: Mapping[str, str] | None = None,
    ) -> Reply:
        h = {**self._headers(token, as_json, site), **(headers or {})}
        async with self.session.post(
            self.url + path, data=dict(data or {}), headers=h, allow_redirects=False
        ) as r:
            return Reply(r.status, r.headers, await r.text(), str(r.url))


@pytest.fixture
def web_tokens() -> dict[str, str]:
    """The dashboard's tokens in these tests: ``read`` (viewer) and ``admin`` (admin)."""
    return {"read": READ, "admin": ADMIN}


@pytest.fixture
def web_sources(
    endpoints: Endpoints, prefix: str, make_topic: Callable[..., str], cron_settings: CronSettings
) -> Sources:
    """What this test's dashboard reads: its own topic (routing ``<prefix>*`` to it), relay keys and cron
    schedules under ``jobq-test/<prefix>``, the session's Kafka, Consul and Redis, no history tables."""
    topic = make_topic("jobs", partitions=2)
    return Sources(
        routing=RoutingSettings(routes=[Route(queues=f"{prefix}*", topic=topic)], default_topic=""),
        relay=RelayKeys(topics=[topic], kv_prefix=f"jobq-test/{prefix}", group_prefix=f"{prefix}-relay"),
        kafka=KafkaSettings(bootstrap=endpoints.kafka_bootstrap),
        consul=ConsulSettings(addr=endpoints.consul_addr),
        redis=RedisSettings(url=endpoints.redis_url or ""),
        cron=cron_settings,
        history=HistorySettings(path="/nonexistent/jobq-history"),
    )


@pytest.fixture
async def dash(web_sources: Sources, prefix: str) -> AsyncIterator[Dash]:
    settings = WebSettings(
        port=0, read_tokens=[SecretStr(f"viewer:{READ}")], admin_tokens=[SecretStr(f"admin:{ADMIN}")]
    )
    jar = aiohttp.CookieJar(unsafe=True)  # the dashboard is on 127.0.0.1: keep its cookie
    async with WebService(settings, web_sources) as service, aiohttp.ClientSession(cookie_jar=jar) as session:
        yield Dash(
            service.url,
            session,
            web_sources,
            prefix,
            web_sources.relay.topics[0],
            web_sources.relay.kv_prefix,
        )
