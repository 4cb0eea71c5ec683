"""A TCP fault proxy for the fault-injection tests: Shopify's toxiproxy, driven over its HTTP API.

Killing a server tests a crash; most production outages are not crashes but a network that refuses, hangs,
drops or slows connections while every process stays up. :class:`FaultProxy` puts a toxiproxy server
between a client and a real server (Redis, Kafka, Consul) so a test can do exactly that to one link and
undo it, without touching the server or the client's configuration beyond the address it dials.

The server is built from its Go module once (:func:`ensure_toxiproxy`) and runs as a
supervised child on a free loopback port for as long as the :class:`FaultProxy` is open. Each proxy is a
named listener on ``127.0.0.1`` forwarding to one upstream; a fault applies to every connection through it,
open or new. The client is synchronous (``urllib``): a fault call returns once toxiproxy applied it.
"""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType
from typing import Any

from jqstack.errors import StackError
from jqstack.paths import TOXIPROXY_VERSION
from jqstack.procs import free_port
from jqstack.provision import build_go_tool
from jqstack.supervise import http_ok, start

__all__ = ["FaultProxy", "ensure_toxiproxy"]

_STREAMS = ("upstream", "downstream")
"""toxiproxy's two directions: client to server (upstream) and server to client (downstream)."""


def ensure_toxiproxy() -> Path:
    """Shopify's toxiproxy server, the TCP fault proxy of the fault-injection tests
    (this module), built once from its Go module through the wrapper in
    ``deploy/toxiproxy`` (:func:`jqstack.provision.build_go_tool`). The version is stamped into the binary
    so its ``GET /version`` names it."""
    module = "github.com/Shopify/toxiproxy/v2"
    return build_go_tool(
        "toxiproxy",
        TOXIPROXY_VERSION,
        module,
        f"{module}/cmd/server",
        ldflags=f"-X {module}.Version={TOXIPROXY_VERSION}",
        note="first run only, ~1 min",
    )


class FaultProxy:
    """One toxiproxy server (its API on ``127.0.0.1:<free port>``, logging into ``log_dir``) and the proxies
    it holds. Started by the constructor, stopped by :meth:`close` or by leaving the ``with`` block;
    ``timeout_s`` bounds the start and each API call.

    Every method names the proxy it acts on; a refusal of toxiproxy's API (an unknown proxy, a name taken,
    a port in use) raises :class:`StackError` with that name and the API's message.
    """

    def __init__(self, log_dir: Path, *, timeout_s: float = 30.0) -> None:
        binary = ensure_toxiproxy()
        port = free_port()
        self.api = f"http://127.0.0.1:{port}"
        self.log = log_dir / f"toxiproxy-{port}.log"
        self._timeout_s = timeout_s
        self._child = start(
            "toxiproxy",
            [str(binary), "-host", "127.0.0.1", "-port", str(port)],
            output=self.log,
            env={**os.environ, "LOG_LEVEL": "info"},  # its default is trace: many lines per connection
        )
        try:
            self._child.wait_ready(http_ok(f"{self.api}/version"), timeout_s=timeout_s, what="toxiproxy")
        except BaseException:
            self._child.stop()
            raise

    def add(self, name: str, upstream: str, listen_port: int | None = None) -> int:
        """Create proxy ``name`` listening on ``127.0.0.1:listen_port`` and forwarding to ``upstream``
        (``host:port``); returns the port it listens on. Without ``listen_port`` toxiproxy binds port 0,
        so the port is free by construction, and keeps it across :meth:`cut` and :meth:`restore`."""
        proxy = self._call(
            "POST",
            "/proxies",
            name,
            {"name": name, "listen": f"127.0.0.1:{listen_port or 0}", "upstream": upstream, "enabled": True},
        )
        return int(str(proxy["listen"]).rsplit(":", 1)[1])

    def remove(self, name: str) -> None:
        """Delete proxy ``name``: its port stops listening and its connections close."""
        self._call("DELETE", _path(name), name)

    def cut(self, name: str) -> None:
        """Take the link down: new connections are refused and open ones are closed, as clients see a
        server process that died (a partition that hangs instead is :meth:`blackhole`)."""
        self._call("PATCH", _path(name), name, {"enabled": False})

    def restore(self, name: str) -> None:
        """Undo every fault on ``name``: listen again (on the same port) and remove all toxics."""
        self._call("PATCH", _path(name), name, {"enabled": True})
        self.clear(name)

    def slow(self, name: str, latency_ms: int, jitter_ms: int = 0) -> None:
        """Delay every chunk by ``latency_ms`` (± ``jitter_ms``) in each direction, so a request and its
        answer take at least twice ``latency_ms`` (with no jitter). A second call changes the delay."""
        self._toxic(name, "latency", {"latency": latency_ms, "jitter": jitter_ms})

    def blackhole(self, name: str) -> None:
        """Connections open and stay open, but no byte passes either way (toxiproxy's ``timeout`` toxic
        with timeout 0): the hung peer that only a client's own timeout detects. The bytes sent meanwhile
        are dropped, and toxiproxy closes the connections the toxic held when it is removed."""
        self._toxic(name, "timeout", {"timeout": 0})

    def reset(self, name: str) -> None:
        """Reset every connection (TCP RST) as soon as data arrives on it, from either side
        (``reset_peer``): a request is never delivered and the client sees "connection reset by peer"."""
        self._toxic(name, "reset_peer", {"timeout": 0})

    def clear(self, name: str) -> None:
        """Remove every toxic of ``name`` (a :meth:`cut` stays in force: :meth:`restore` undoes both)."""
        for toxic in self._toxics(name):
            self._call("DELETE", f"{_path(name)}/toxics/{_quote(toxic)}", name)

    def restore_all(self) -> None:
        """Enable every proxy and remove every toxic (toxiproxy's ``POST /reset``)."""
        self._call("POST", "/reset", "*")

    def close(self) -> None:
        """Stop the server; every proxy's port closes with it. Idempotent."""
        self._child.stop(grace_s=5.0)

    def __enter__(self) -> FaultProxy:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def _toxics(self, name: str) -> list[str]:
        toxics: list[dict[str, Any]] = self._call("GET", f"{_path(name)}/toxics", name)
        return [str(toxic["name"]) for toxic in toxics]

    def _toxic(self, name: str, kind: str, attributes: Mapping[str, int]) -> None:
        """Put toxic ``kind`` on both streams of ``name``, named ``<kind>_<stream>`` (toxiproxy's own
        default); one already there gets the new attributes, so applying a fault twice is harmless."""
        present = set(self._toxics(name))
        toxics = f"{_path(name)}/toxics"
        for stream in _STREAMS:
            toxic = f"{kind}_{stream}"
            if toxic in present:
                self._call("PATCH", f"{toxics}/{_quote(toxic)}", name, {"attributes": attributes})
            else:
                body = {
                    "name": toxic,
                    "type": kind,
                    "stream": stream,
                    "toxicity": 1.0,
                    "attributes": attributes,
                }
                self._call("POST", toxics, name, body)

    def _call(self, method: str, path: str, proxy: str, body: Mapping[str, object] | None = None) -> Any:
        """One API request; its decoded JSON answer (None when empty)."""
        request = urllib.request.Request(
            self.api + path,
            data=None if body is None else json.dumps(body).encode(),
            method=method,
            headers={"Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(request, timeout=self._timeout_s) as response:
                raw: bytes = response.read()
        except urllib.error.HTTPError as exc:
            raise StackError(f"fault proxy {proxy!r}: {method} {path}: {_api_error(exc)}") from None
        except OSError as exc:
            raise StackError(f"fault proxy {proxy!r}: toxiproxy at {self.api} did not answer: {exc}") from exc
        return json.loads(raw) if raw.strip() else None


def _path(name: str) -> str:
    return f"/proxies/{_quote(name)}"


def _quote(segment: str) -> str:
    return urllib.parse.quote(segment, safe="")


def _api_error(exc: urllib.error.HTTPError) -> str:
    """toxiproxy's message from an error answer (``{"error": ..., "status": ...}``), else the raw body."""
    with exc:
        text = exc.read().decode(errors="replace").strip()
    try:
        message = json.loads(text)["error"]
    except (ValueError, KeyError, TypeError):
        message = text or exc.reason
    return f"{message} (HTTP {exc.code})"
