"""``jobq web`` / ``python -m jqweb``: serve the dashboard until SIGTERM/SIGINT."""

from __future__ import annotations

import asyncio
import contextlib
import signal

from aiohttp import web

from jqcore.errors import ConfigError
from jqcore.log import get_logger
from jqcore.settings.common import load
from jqruntime.http import serve_http
from jqruntime.lifecycle import Service, run_until_signal
from jqruntime.stores.presence import Presence, process_name
from jqruntime.tokens import TokenSettings, reload_all
from jqweb.app import make_app
from jqweb.context import Web
from jqweb.overview import Sources
from jqweb.settings import WebSettings

__all__ = ["WebService", "run"]

log = get_logger("jqweb")


class WebService(Service):
    """The dashboard on ``settings.host:settings.port`` (port 0: any free port)."""

    def __init__(self, settings: WebSettings, sources: Sources) -> None:
        super().__init__()
        if not settings.read_tokens and not settings.admin_tokens and load(TokenSettings).file is None:
            raise ConfigError(
                "set JOBQ_TOKENS_FILE, JOBQ_WEB_READ_TOKENS and/or JOBQ_WEB_ADMIN_TOKENS: no token, "
                "no dashboard"
            )
        self.settings = settings
        self.web = Web(settings, sources)
        """What the pages share; it makes its clients on first use and closes them when stopped."""
        self._runner: web.AppRunner | None = None
        self._presence: Presence | None = None
        self.port = settings.port

    async def _start(self) -> None:
        self._runner, self.port = await serve_http(make_app(self.web), self.settings.host, self.settings.port)
        with contextlib.suppress(RuntimeError, ValueError):  # not the main thread: no signals here
            asyncio.get_running_loop().add_signal_handler(signal.SIGHUP, reload_all)
        self._presence = Presence(
            self.web.client, "web", process_name(), facts=lambda: {"kind": "dashboard", "port": self.port}
        )
        await self._presence.start()
        log.info("dashboard serving", url=self.url)

    @property
    def url(self) -> str:
        return f"http://{self.settings.host}:{self.port}"

    async def _stop(self) -> None:
        with contextlib.suppress(RuntimeError, ValueError):
            asyncio.get_running_loop().remove_signal_handler(signal.SIGHUP)
        if self._presence is not None:
            await self._presence.stop()
        if self._runner is not None:
            await self._runner.cleanup()  # closes the Redis and Consul clients (app cleanup)
            self._runner = None
        await self.web.close()  # (again: a no-op after the app's cleanup closed them)


def run(settings: WebSettings | None = None) -> None:
    """Serve until a signal; the settings not given come from the environment."""
    service = WebService(settings if settings is not None else load(WebSettings), Sources())
    asyncio.run(run_until_signal(service))
