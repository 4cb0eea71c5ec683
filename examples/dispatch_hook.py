"""A tiny downstream for push dispatch (``jobq dispatcher``, ``docs/dispatcher.md``): the demo's, and an
example of the contract.

    python -m examples.dispatch_hook --port 28095

``POST /hook`` takes a pushed job. ``args.mode``: ``now`` answers 200 with a result at once; ``later``
answers 202 and calls back through the gateway after ``args.delay_s`` (default 0.5) with the job's
signed callback token; ``fail`` answers 503 (the attempt is retried with the kind's backoff).
"""

from __future__ import annotations

import argparse
import asyncio
from typing import Any

import aiohttp
from aiohttp import web

__all__ = ["main", "make_app"]

CALLBACKS = web.AppKey("callbacks", set[asyncio.Task[None]])


async def hook(request: web.Request) -> web.Response:
    job: dict[str, Any] = await request.json()
    given = job.get("args")
    args: dict[str, Any] = given if isinstance(given, dict) else {}
    mode = args.get("mode", "now")
    if mode == "fail":
        return web.json_response({"error": "asked to fail"}, status=503)
    if mode == "later":
        task = asyncio.create_task(_call_back(job, float(args.get("delay_s", 0.5))))
        request.app[CALLBACKS].add(task)
        task.add_done_callback(request.app[CALLBACKS].discard)
        return web.json_response({"accepted": job["id"]}, status=202)
    return web.json_response({"handled": job["id"], "attempt": job["attempt"]})


async def _call_back(job: dict[str, Any], delay_s: float) -> None:
    """Finish the work later, then report it with the token the dispatcher sent."""
    await asyncio.sleep(delay_s)
    callback = job["callback"]
    body = {"callback_token": callback["token"], "result": {"handled": job["id"], "later": True}}
    async with aiohttp.ClientSession() as http, http.post(callback["complete_url"], json=body) as resp:
        print(f"callback for {job['id']} attempt {job['attempt']}: HTTP {resp.status}", flush=True)


def make_app() -> web.Application:
    app = web.Application()
    app[CALLBACKS] = set()
    app.router.add_post("/hook", hook)
    return app


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=28095)
    opts = parser.parse_args()
    web.run_app(make_app(), host=opts.host, port=opts.port, print=None)


if __name__ == "__main__":
    main()
