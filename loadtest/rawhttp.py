"""A lean HTTP/1.1 keep-alive client for open-loop load: pre-encoded requests over a pool of plain
asyncio streams. It costs a fraction of a general client's CPU per request, so on a 2-core machine the
load generator's own lag stays out of the latencies it measures (the generator shares the cores with
the system under test). Only what the gateway's answers need: a status line, headers, Content-Length.
"""

from __future__ import annotations

import asyncio
import contextlib

__all__ = ["RawHttp"]


class RawHttp:
    def __init__(self, host: str, port: int, connections: int, headers: dict[str, str]) -> None:
        self.host, self.port, self.connections = host, port, connections
        self._head = "".join(f"{k}: {v}\r\n" for k, v in {"Host": f"{host}:{port}", **headers}.items())
        self._idle: asyncio.Queue[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = asyncio.Queue()
        self._all: list[asyncio.StreamWriter] = []
        self._tasks: set[asyncio.Task[None]] = set()

    async def __aenter__(self) -> RawHttp:
        for _ in range(self.connections):
            reader, writer = await asyncio.open_connection(self.host, self.port)
            self._all.append(writer)
            self._idle.put_nowait((reader, writer))
        return self

    async def _replace(self) -> None:
        reader, writer = await asyncio.open_connection(self.host, self.port)
        self._all.append(writer)
        self._idle.put_nowait((reader, writer))

    async def __aexit__(self, *exc: object) -> None:
        for writer in self._all:
            writer.close()
        for writer in self._all:
            with contextlib.suppress(OSError):
                await writer.wait_closed()

    def request(self, method: str, path: str, body: bytes, content_type: str = "application/json") -> bytes:
        """The bytes of one request (build once, send many times)."""
        head = f"{method} {path} HTTP/1.1\r\n{self._head}Content-Type: {content_type}\r\n"
        return f"{head}Content-Length: {len(body)}\r\n\r\n".encode() + body

    async def send(self, request: bytes) -> tuple[int, bytes]:
        """Send pre-built ``request`` on an idle connection (waiting for one); (status, body)."""
        reader, writer = await self._idle.get()
        ok = False
        try:
            writer.write(request)
            head = await reader.readuntil(b"\r\n\r\n")
            status = int(head[9:12])
            length = 0
            for line in head.split(b"\r\n")[1:]:
                name, _, value = line.partition(b":")
                if name.strip().lower() == b"content-length":
                    length = int(value)
            body = await reader.readexactly(length) if length else b""
            ok = True
        finally:
            if ok:
                self._idle.put_nowait((reader, writer))
            else:  # a half-read answer leaves the connection unusable: replace it
                writer.close()
                task = asyncio.create_task(self._replace())
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)
        return status, body
