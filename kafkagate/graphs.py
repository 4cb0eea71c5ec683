"""Task graph endpoints: submit a whole graph (into Kafka, one record), look at it, cancel it, retry it
from its failed nodes. ``POST /v1/graphs`` needs ``enqueue``; cancel and retry ``admin``; GET ``read``."""

from __future__ import annotations

from aiohttp import web

from jqcore.admission import SIGNATURE_HEADER, sign
from jqcore.clock import now_ms
from jqcore.envelope import encode
from jqcore.errors import FieldError, GraphIdTaken, GraphInvalid
from jqcore.graphs import graph_envelope, node_job_id
from jqcore.routing import QueueNotAllowed, QueueUnrouted
from jqruntime.authz import Policy
from jqruntime.http import json_response
from jqruntime.kafka import Record
from kafkagate import admin_models as m
from kafkagate.api import Api
from kafkagate.auth import graph_body, graph_owner
from kafkagate.enqueue import Parsed, check_blocked, produce
from kafkagate.requests import engine_call, graph_id_of, graph_spec, json_body
from kafkagate.state import GATE

__all__ = ["routes"]

routes = Api()


@routes.post(
    "/v1/graphs",
    policy=Policy("enqueue", (graph_body,)),
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
        409: "graph_id_taken: the id is another queue's graph (a graph id belongs to its home queue)",
        423: "queue_blocked: the graph's queue or a node's has its enqueue_blocked flag set; nothing written",
        503: "kafka_unavailable, topic_missing: Kafka did not confirm (Retry-After)",
    },
)
async def submit(request: web.Request) -> web.Response:
    """Validate the graph whole, write it to Kafka as one record and answer 202 once Kafka has it.
    Submitting the same id again makes no second graph (the engine keeps the first)."""
    gate = request.app[GATE]
    now = now_ms()
    spec = await graph_spec(request)
    for node in spec.all_nodes():  # every node's queue is one this deployment serves
        if not gate.routing.allows(node.queue):
            raise QueueNotAllowed(
                f"node {node.name!r}: queue {node.queue!r} is not one of the queues allowed here"
            )
    home = await engine_call(gate.engine.graphs.home(spec.id))
    if home is not None and home != spec.queue:  # the relay would refuse it: say so now
        raise GraphIdTaken(f"graph id {spec.id!r} is taken by another queue's graph: choose another id")
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
    value = encode(env)
    headers = [
        ("jobq-queue", spec.queue.encode()),
        ("jobq-kind", env.kind.encode()),
        (SIGNATURE_HEADER, sign(await gate.graph_key(), value)),  # checked node by node: jqcore.admission
    ]
    record = Record(topic, value, spec.id.encode(), headers)
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
    policy=Policy("read", (graph_owner,)),
    operation_id="get_graph",
    summary="a graph: state, nodes, results, errors, timings",
    answer=m.Graph,
    errors={404: "graph_not_found: no such graph"},
)
async def show(request: web.Request) -> web.Response:
    info = await engine_call(request.app[GATE].engine.graphs.get(graph_id_of(request)))
    return json_response(info.as_dict())


@routes.post(
    "/v1/graphs/{graph}/cancel",
    policy=Policy("admin", (graph_owner,)),
    operation_id="cancel_graph",
    summary="cancel a running graph and its nodes",
    body=m.GraphActionIn,
    body_example={"reason": "no longer needed"},
    answer=m.GraphCanceled,
    errors={404: "graph_not_found: no such graph"},
)
async def cancel(request: web.Request) -> web.Response:
    graph_id = graph_id_of(request)
    body = await json_body(request)
    reason = body.get("reason", "canceled") if isinstance(body, dict) else "canceled"
    graphs = request.app[GATE].engine.graphs
    changed = await engine_call(graphs.cancel(graph_id, str(reason)[:200]))
    info = await engine_call(graphs.get(graph_id))
    return json_response({"canceled": changed, "state": info.state})


@routes.post(
    "/v1/graphs/{graph}/retry",
    policy=Policy("admin", (graph_owner,)),
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
    graph_id = graph_id_of(request)
    body = await json_body(request)
    deadline = body.get("deadline_ms") if isinstance(body, dict) else None
    if deadline is not None and (
        not isinstance(deadline, int) or isinstance(deadline, bool) or deadline <= 0
    ):
        raise GraphInvalid(FieldError("deadline_ms", "must be a positive integer (milliseconds from now)"))
    released = await engine_call(request.app[GATE].engine.graphs.retry(graph_id, deadline_ms=deadline))
    return json_response({"id": graph_id, "state": "running", "released": released})
