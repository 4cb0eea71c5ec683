"""One event loop and one asyncio client per process, for sync and async callers (``jobq.Client``, the
Django backend).

Synchronous code (a Flask view, a script, Django's ``enqueue`` from a plain thread) and any event loop
(an ASGI view) share one client. The client is asyncio code whose connections belong to one loop, so it
lives on a loop of its own in a daemon thread: sync callers block on it, async callers await it from their
loop. Connections are kept between calls. A forked child (a pre-forking server) gets a new loop and client
of its own on its first call. A blocking call from the portal's own loop (an async handler run in-process
by ``jobq.testing`` calling the sync API) would wait for itself: it is refused with a clear error.
"""

from __future__ import annotations

import asyncio
import atexit
import os
import threading
from collections.abc import Awaitable, Callable
from typing import Any, Generic, Protocol, Self, TypeVar

__all__ = ["Portal"]

T = TypeVar("T")


class Opened(Protocol):
    async def __aenter__(self) -> Self: ...

    async def close(self) -> None: ...


C = TypeVar("C", bound=Opened)


class Portal(Generic[C]):
    def __init__(self, make_client: Callable[[], C]) -> None:
        self._make_client = make_client
        self._lock = threading.Lock()
        self._pid: int | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._client: C | None = None
        self._thread: threading.Thread | None = None

    def _ready(self) -> tuple[asyncio.AbstractEventLoop, C]:
        with self._lock:
            if self._pid != os.getpid() or self._loop is None or self._client is None:
                loop = asyncio.new_event_loop()
                self._thread = threading.Thread(target=_serve, args=(loop,), name="jobq-client", daemon=True)
                self._thread.start()

                async def open_client() -> C:
                    return await self._make_client().__aenter__()

                self._client = asyncio.run_coroutine_threadsafe(open_client(), loop).result()
                self._loop, self._pid = loop, os.getpid()
                atexit.register(self.close)  # its connections closed at exit (no "unclosed" warnings)
            return self._loop, self._client

    def call(self, fn: Callable[[C], Awaitable[T]]) -> T:
        """Run ``fn(client)`` on the portal's loop and wait for it (from a thread that runs no loop)."""
        if threading.current_thread() is self._thread:
            raise RuntimeError(
                "a blocking jobq call from inside the client's own event loop (an async handler run by"
                " jobq.testing?): use the async API there (await spec.aenqueue(...), AsyncClient)"
            )
        loop, client = self._ready()
        return asyncio.run_coroutine_threadsafe(_run(fn, client), loop).result()

    async def acall(self, fn: Callable[[C], Awaitable[T]]) -> T:
        """Run ``fn(client)`` on the portal's loop and await it from the caller's loop."""
        loop, client = self._ready()
        return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(_run(fn, client), loop))

    def close(self) -> None:
        """Close the client and stop the loop (Django's ``task_backends.close_all()``); a later call
        opens them again."""
        with self._lock:
            loop, client, pid = self._loop, self._client, self._pid
            self._loop = self._client = self._pid = None
        atexit.unregister(self.close)
        if loop is None or client is None or pid != os.getpid():
            return
        asyncio.run_coroutine_threadsafe(client.close(), loop).result()
        loop.call_soon_threadsafe(loop.stop)


def _serve(loop: asyncio.AbstractEventLoop) -> None:
    try:
        loop.run_forever()
    finally:
        loop.close()


async def _run(fn: Callable[[Any], Awaitable[T]], client: Any) -> T:
    return await fn(client)
