"""Kill switches over HTTP: ``PUT /v1/switches/{name}`` puts one in force (admin), ``DELETE`` lifts it,
``GET /v1/switches`` lists them. A switch stops matching jobs from starting from the moment the PUT
answers (see :mod:`jqengine.switchrules`). Consul keeps a copy of each switch in force, so a switch survives
Redis losing its data (:mod:`jqruntime.stores.config`: set in Redis first, then kept; lifted there first)."""

from __future__ import annotations

from aiohttp import web

from jqengine import Switch
from jqruntime.authz import Policy
from jqruntime.http import TOKEN_NAME, json_response
from jqruntime.stores.config import lift_switch, set_switch
from kafkagate import admin_models as m
from kafkagate.api import Api
from kafkagate.auth import switch_owner, switch_put, token_of
from kafkagate.queue_bodies import SwitchBody
from kafkagate.requests import body_model, engine_call
from kafkagate.state import GATE

__all__ = ["routes"]

routes = Api()


@routes.get(
    "/v1/switches",
    policy=Policy("read"),
    summary="every kill switch in force (those the token may see)",
    answer=m.SwitchList,
)
async def list_switches(request: web.Request) -> web.Response:
    gate = request.app[GATE]
    token = token_of(request)
    every = await engine_call(gate.engine.admin.switches())
    mine = [s for s in every if token.every_queue or token.allows_queue(s.queue)]
    return json_response({"switches": [s.as_dict() for s in mine]})


@routes.put(
    "/v1/switches/{name}",
    policy=Policy("admin", (switch_put,)),
    summary="put a kill switch in force (queue glob, kind, meta pairs; park or dead): matching jobs are"
    " not started from the answer on; a switch of the same name is replaced",
    body=SwitchBody,
    body_example={"queue": "billing.*", "kind": "pdf.render", "action": "park"},
    answer=m.SwitchSet,
    errors={
        400: "switch_invalid: an invalid switch (each problem named)",
        409: "switches_full: no room for another switch (in all, or on its queue or glob)",
        503: "consul_unavailable: the switch is in force but Consul did not keep it (a Redis loss would lose"
        " it): send it again",
    },
)
async def put_switch(request: web.Request) -> web.Response:
    gate = request.app[GATE]
    body = await body_model(request, SwitchBody)
    switch = Switch(
        name=request.match_info["name"],
        action=body.action,
        queue=body.queue,
        kind=body.kind,
        meta=body.meta,
        set_at_ms=await engine_call(gate.engine.now()),
        by=request.get(TOKEN_NAME, ""),
    )
    queues = await engine_call(set_switch(gate.configs(), gate.engine, switch))
    return json_response({"switch": switch.as_dict(), "queues": queues})


@routes.delete(
    "/v1/switches/{name}",
    policy=Policy("admin", (switch_owner,)),
    summary="lift a kill switch: the jobs it parked are pending again",
    answer=m.SwitchLifted,
    errors={
        404: "switch_not_found: no such switch in force (nor kept)",
        503: "consul_unavailable: Consul did not answer; nothing lifted (the switch is still in force)",
    },
)
async def delete_switch(request: web.Request) -> web.Response:
    gate = request.app[GATE]
    name = request.match_info["name"]
    moved = await engine_call(lift_switch(gate.configs(), gate.engine, name))
    return json_response({"name": name, "lifted": True, "jobs_released": moved})
