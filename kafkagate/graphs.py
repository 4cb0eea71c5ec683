"""Task graph endpoints: submit a whole graph (into Kafka, one record), look at it, cancel it, retry it
from its failed nodes. ``POST /v1/graphs`` needs ``enqueue``; cancel and retry ``admin``; GET ``read``."""

from __future__ import annotations

from typing import Any

import orjson
from aiohttp import web

from jqcore.clock import now_ms
from jqcore.envelope import encode, validate_name
from jqcore.errors import EnvelopeError, FieldError, GraphInvalid
from jqcore.graphs import graph_envelope, node_job_id, parse
from jqcore.routing import QueueNotAllowed, QueueUnrouted
from jqengine import GraphInfo
from jqruntime.http import HttpError, json_response
from jqruntime.kafka import Record
from kafkagate import admin_models as m
from kafkagate.api import Api
from kafkagate.auth import require_kind, require_queue
from kafkagate.body import read_body
from kafkagate.enqueue import Parsed
from kafkagate.jobs import check_blocked, engine_call, produce
from kafkagate.state import GATE

__all__ = ["routes"]

routes = Api()


def _graph_id(request: web.Request) -> str:
    try:
        return validate_name("id", request.match_info["graph"])
    except EnvelopeError as exc:
        raise HttpError(400, "graph_id_invalid", exc.message, exc.fields) from None


async def _json(request: web.Request) -> Any:
    raw = await read_body(request)
    try:
        return orjson.loads(raw or b"{}")
    except orjson.JSONDecodeError as exc:
        raise HttpError(400, "body_not_json", f"the body is not JSON: {exc}") from None


@routes.post(
    "/v1/graphs",
    operation_id="submit_graph",
    summary="submit a task graph whole (any DAG, or a pipeline, chain, group + callback, map); 202 once"
    " Kafka has it; the same id again makes no second graph",
    body=m.GraphIn,
    answer=m.GraphAccepted,
    ok=202,
    errors={
        400: "graph_invalid, queue_unrouted: an invalid graph (each problem named)",
        403: "kind_forbidden, queue_not_allowed: a node's kind or queue is not the token's, or not served"
        " here",
        423: "queue_blocked: the graph's queue or a node's has its enqueue_blocked flag set; nothing written",
        503: "kafka_unavailable, topic_missing: Kafka did not confirm (Retry-After)",
    },
)
async def submit(request: web.Request) -> web.Response:
    """Validate the graph whole, write it to Kafka as one record and answer 202 once Kafka has it.
    Submitting the same id again makes no second graph (the engine keeps the first)."""
    gate = request.app[GATE]
    now = now_ms()
    spec = parse(await _json(request), now=now)
    require_queue(request, spec.queue)
    for node in spec.all_nodes():  # every node's queue and kind, the on_failure node's too
        require_queue(request, node.queue)
        require_kind(request, node.kind, f"nodes.{node.name}")
        if not gate.routing.allows(node.queue):
            raise QueueNotAllowed(
                f"node {node.name!r}: queue {node.queue!r} is not one of the queues allowed here"
            )
    await check_blocked(gate, spec.queue, "the graph's ")
    for node in spec.all_nodes():  # a graph goes in whole or not at all
        if node.queue != spec.queue:
            await check_blocked(gate, node.queue, f"node {node.name!r}: ")
    env = graph_envelope(spec, at_ms=now)
    try:
        topic, acks = gate.routing.route(spec.queue)
    except QueueUnrouted as exc:
        raise GraphInvalid(FieldError("queue", exc.message), code="queue_unrouted") from None
    await gate.check_topic(topic)
    headers = [("jobq-queue", spec.queue.encode()), ("jobq-kind", env.kind.encode())]
    record = Record(topic, encode(env), spec.id.encode(), headers)
    (delivered,) = await produce(gate, Parsed([env], [None]), [record], acks)
    gate.count_produced(topic, 1)
    body = {
        "id": spec.id,
        "queue": spec.queue,
        "topic": delivered.topic,
        "partition": delivered.partition,
        "offset": delivered.offset,
        "nodes": {n.name: node_job_id(spec.id, n.name) for n in spec.all_nodes()},
    }
    return json_response(body, 202)


@routes.get(
    "/v1/graphs/{graph}",
    operation_id="get_graph",
    summary="a graph: state, nodes, results, errors, timings",
    answer=m.Graph,
    errors={404: "graph_not_found: no such graph"},
)
async def show(request: web.Request) -> web.Response:
    info = await _readable(request, _graph_id(request))
    return json_response(info.as_dict())


async def _readable(request: web.Request, graph_id: str) -> GraphInfo:
    """The graph, once the token may use its home queue and every node's queue."""
    info: GraphInfo = await engine_call(request.app[GATE].engine.graphs.get(graph_id))
    for queue in {info.queue, *(n.queue for n in info.nodes)}:
        require_queue(request, queue)
    return info


@routes.post(
    "/v1/graphs/{graph}/cancel",
    operation_id="cancel_graph",
    summary="cancel a running graph and its nodes",
    body=m.GraphActionIn,
    body_example={"reason": "no longer needed"},
    answer=m.GraphCanceled,
    errors={404: "graph_not_found: no such graph"},
)
async def cancel(request: web.Request) -> web.Response:
    graph_id = _graph_id(request)
    await _readable(request, graph_id)
    body = await _json(request)
    reason = body.get("reason", "canceled") if isinstance(body, dict) else "canceled"
    graphs = request.app[GATE].engine.graphs
    changed = await engine_call(graphs.cancel(graph_id, str(reason)[:200]))
    info = await engine_call(graphs.get(graph_id))
    return json_response({"canceled": changed, "state": info.state})


@routes.post(
    "/v1/graphs/{graph}/retry",
    operation_id="retry_graph",
    summary="run a failed or canceled graph again from what did not complete",
    body=m.GraphActionIn,
    body_example={"deadline_ms": 600000},
    answer=m.GraphRetried,
    errors={
        404: "graph_not_found: no such graph",
        409: "graph_conflict: still running, or completed",
        400: "graph_invalid: a bad deadline_ms",
    },
)
async def retry(request: web.Request) -> web.Response:
    """Run a failed or canceled graph again from what did not complete (409 while running or after it
    completed)."""
    graph_id = _graph_id(request)
    await _readable(request, graph_id)
    body = await _json(request)
    deadline = body.get("deadline_ms") if isinstance(body, dict) else None
    if deadline is not None and (
        not isinstance(deadline, int) or isinstance(deadline, bool) or deadline <= 0
    ):
        raise GraphInvalid(FieldError("deadline_ms", "must be a positive integer (milliseconds from now)"))
    released = await engine_call(request.app[GATE].engine.graphs.retry(graph_id, deadline_ms=deadline))
    return json_response({"id": graph_id, "state": "running", "released": released})
