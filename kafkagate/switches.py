"""Kill switches over HTTP: ``PUT /v1/switches/{name}`` puts one in force (admin), ``DELETE`` lifts it,
``GET /v1/switches`` lists them. A switch stops matching jobs from starting from the moment the PUT
answers (see :mod:`jqengine.switchrules`)."""

from __future__ import annotations

from typing import Literal

from aiohttp import web
from pydantic import BaseModel, ConfigDict, Field

from jqengine import Switch
from jqruntime.http import TOKEN_NAME, json_response
from kafkagate import admin_models as m
from kafkagate.api import Api
from kafkagate.auth import require_every_queue, require_queue, token_of
from kafkagate.body import read_body
from kafkagate.jobs import engine_call
from kafkagate.queues import parse_model
from kafkagate.state import GATE

__all__ = ["routes"]

routes = Api()


class SwitchBody(BaseModel):
    model_config = ConfigDict(extra="forbid")

    queue: str = "*"
    """A queue name or glob (``billing.*``); ``*``: every queue."""
    kind: str = ""
    """A job kind (exact); empty: every kind."""
    meta: dict[str, str] = Field(default_factory=dict)
    """Meta pairs a job must all carry (as strings) to match."""
    action: Literal["park", "dead"] = "park"
    """``park``: matching jobs wait, no attempt spent, until the switch lifts; ``dead``: they go to the
    dead letters with the reason ``kill switch <name>``."""


def _require_scope_of(request: web.Request, queue: str) -> None:
    """A token limited to some queues may switch one of them by name, never a glob (it could reach
    another team's queues)."""
    if any(c in queue for c in "*?["):
        require_every_queue(request, f"a kill switch on the glob {queue!r} needs a token of every queue")
    else:
        require_queue(request, queue)


@routes.get(
    "/v1/switches", summary="every kill switch in force (those the token may see)", answer=m.SwitchList
)
async def list_switches(request: web.Request) -> web.Response:
    gate = request.app[GATE]
    token = token_of(request)
    every = await engine_call(gate.engine.switches())
    mine = [s for s in every if token.every_queue or token.allows_queue(s.queue)]
    return json_response({"switches": [s.as_dict() for s in mine]})


@routes.put(
    "/v1/switches/{name}",
    summary="put a kill switch in force (queue glob, kind, meta pairs; park or dead): matching jobs are"
    " not started from the answer on; a switch of the same name is replaced",
    body=SwitchBody,
    body_example={"queue": "billing.*", "kind": "pdf.render", "action": "park"},
    answer=m.SwitchSet,
    errors={400: "switch_invalid: an invalid switch (each problem named)"},
)
async def put_switch(request: web.Request) -> web.Response:
    gate = request.app[GATE]
    body = parse_model(SwitchBody, await read_body(request))
    _require_scope_of(request, body.queue)
    switch = Switch(
        name=request.match_info["name"],
        action=body.action,
        queue=body.queue,
        kind=body.kind,
        meta=body.meta,
        set_at_ms=await engine_call(gate.engine.now()),
        by=request.get(TOKEN_NAME, ""),
    )
    queues = await engine_call(gate.engine.set_switch(switch))
    return json_response({"switch": switch.as_dict(), "queues": queues})


@routes.delete(
    "/v1/switches/{name}",
    summary="lift a kill switch: the jobs it parked are pending again",
    answer=m.SwitchLifted,
    errors={404: "switch_not_found: no such switch in force"},
)
async def delete_switch(request: web.Request) -> web.Response:
    gate = request.app[GATE]
    name = request.match_info["name"]
    for switch in await engine_call(gate.engine.switches()):
        if switch.name == name:
            _require_scope_of(request, switch.queue)
    moved = await engine_call(gate.engine.lift_switch(name))
    return json_response({"name": name, "lifted": True, "jobs_released": moved})
