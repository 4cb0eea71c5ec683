"""The gateway's OpenAPI 3.1 document (served at ``/openapi.json``; a test checks it covers every route)."""

from __future__ import annotations

import re
from functools import cache
from typing import Any

from pydantic import BaseModel

__all__ = ["document"]

_ERROR = {
    "type": "object",
    "required": ["error"],
    "properties": {
        "error": {
            "type": "object",
            "required": ["code", "message"],
            "properties": {
                "code": {"type": "string", "description": "stable machine-readable reason"},
                "message": {"type": "string"},
                "fields": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "properties": {"field": {"type": "string"}, "problem": {"type": "string"}},
                    },
                },
            },
        }
    },
}

_JOB_IN = {
    "type": "object",
    "required": ["kind"],
    "additionalProperties": False,
    "properties": {
        "id": {"type": "string", "description": "client job id (the idempotency key end to end)"},
        "kind": {"type": "string"},
        "args": {"description": "any JSON"},
        "priority": {"type": "integer", "description": "lower runs first; default: enqueue time (FIFO)"},
        "run_at": {"type": "integer", "description": "ms since epoch"},
        "delay_ms": {"type": "integer", "minimum": 0},
        "expires_at": {"type": "integer", "description": "ms since epoch; never run after it"},
        "max_attempts": {"type": "integer", "minimum": 1},
        "lease_ms": {"type": "integer"},
        "meta": {"type": "object", "additionalProperties": {"type": "string"}},
        "excl": {"type": "string", "description": "exclusivity value (exclusive queues)"},
        "trace": {"type": "string", "description": "W3C traceparent"},
        "partition": {"type": "integer", "minimum": 0, "description": "explicit partition (canaries)"},
        "canary": {"type": "boolean"},
    },
}


AUTH_ERRORS = {
    "401": "missing or invalid bearer token",
    "403": "scope_missing, queue_forbidden or kind_forbidden: the token (named) may not do this",
    "429": "rate_limited: the token is over its rate (Retry-After says when to try again)",
}


def _op(
    summary: str,
    ok: str = "200",
    body: dict[str, Any] | None = None,
    errors: dict[str, str] | None = None,
    reply: type[BaseModel] | None = None,
) -> dict[str, Any]:
    responses: dict[str, Any] = {ok: {"description": "success"}}
    if reply is not None:
        responses[ok]["content"] = {"application/json": {"schema": _model(reply)}}
    for status, why in {**AUTH_ERRORS, **(errors or {})}.items():
        responses[status] = {
            "description": why,
            "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}},
        }
    op: dict[str, Any] = {"summary": summary, "responses": responses}
    if body is not None:
        op["requestBody"] = {"required": True, "content": {"application/json": {"schema": body}}}
    return op


def _model(model: type[BaseModel]) -> dict[str, Any]:
    schema = model.model_json_schema()
    inlined: dict[str, Any] = _inline(schema, schema.pop("$defs", {}))
    return inlined


def _inline(node: Any, defs: dict[str, Any]) -> Any:
    """A schema with its ``$defs`` references replaced by the definitions (they would not resolve
    inside this document)."""
    if isinstance(node, dict):
        if "$ref" in node:
            return _inline(defs[node["$ref"].rsplit("/", 1)[-1]], defs)
        return {k: _inline(v, defs) for k, v in node.items()}
    if isinstance(node, list):
        return [_inline(v, defs) for v in node]
    return node


_NAME = {"type": "string", "pattern": "^[A-Za-z0-9][A-Za-z0-9._:@-]{0,127}$"}
_STEP = {"type": "object", "description": "a job: kind, args, queue, name, parents, feed, job options"}
_GRAPH_IN: dict[str, Any] = {
    "type": "object",
    "required": ["id"],
    "properties": {
        "id": {"type": "string", "pattern": "^[A-Za-z0-9][A-Za-z0-9_.-]{0,59}$"},
        "queue": {"type": "string", "description": "home queue: routes the graph, default of its nodes"},
        "nodes": {"type": "array", "items": _STEP},
        "pipeline": {"type": "array", "items": _STEP},
        "chain": {"type": "array", "items": _STEP},
        "group": {"type": "array", "items": _STEP},
        "map": {"type": "object", "description": "{kind, items, queue?, job options}"},
        "callback": _STEP,
        "on_failure": _STEP,
        "deadline_ms": {"type": "integer", "minimum": 1},
        "deadline_at": {"type": "integer"},
        "cancel_on_failure": {"type": "boolean"},
        "retention_ms": {"type": "integer", "minimum": 0},
    },
    "description": "exactly one of nodes, pipeline, chain, group, map (see docs/graphs.md)",
}
_PATH_PARAMS: dict[str, dict[str, Any]] = {
    "queue": {
        "name": "queue",
        "in": "path",
        "required": True,
        "schema": {"type": "string", "pattern": "^[a-z0-9][a-z0-9._-]{0,63}$"},
    },
    "id": {"name": "id", "in": "path", "required": True, "schema": _NAME},
    "kind": {"name": "kind", "in": "path", "required": True, "schema": _NAME},
    "graph": {
        "name": "graph",
        "in": "path",
        "required": True,
        "schema": {"type": "string", "pattern": "^[A-Za-z0-9][A-Za-z0-9_.-]{0,59}$"},
    },
    "name": {
        "name": "name",
        "in": "path",
        "required": True,
        "schema": {"type": "string", "pattern": "^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$"},
    },
}


@cache
def document() -> dict[str, Any]:
    from kafkagate.claims import ClaimBody, CompleteBody, ExtendBody, FailBody
    from kafkagate.cron import schedule_body_schema
    from kafkagate.queues import DeadBody, KindBody, QueueConfigBody, QueuePatchBody
    from kafkagate.switches import SwitchBody
    from kafkagate.workmodels import (
        CancelBody,
        CancelReply,
        HeartbeatBody,
        HeartbeatReply,
        ReleaseBody,
        ReleaseReply,
        SnoozeBody,
        SnoozeReply,
    )

    q = "/v1/queues/{queue}"
    job = f"{q}/jobs/{{id}}"
    batch = {
        "oneOf": [_JOB_IN, {"type": "object", "properties": {"jobs": {"type": "array", "items": _JOB_IN}}}]
    }
    stale = {"409": "stale attempt or lease token", "404": "no such job"}
    no_schedule = {"404": "no such cron schedule"}
    no_graph = {"404": "no such graph"}
    paths: dict[str, Any] = {
        "/healthz": {
            "get": {
                "summary": "the process serves",
                "security": [],
                "responses": {"200": {"description": "ok"}},
            }
        },
        "/readyz": {
            "get": {
                "summary": "Kafka reachable and every routed topic present",
                "security": [],
                "responses": {"200": {"description": "ready"}, "503": {"description": "not ready"}},
            }
        },
        "/metrics": {
            "get": {
                "summary": "Prometheus metrics",
                "security": [],
                "responses": {"200": {"description": "text"}},
            }
        },
        "/openapi.json": {
            "get": {"summary": "this document", "security": [], "responses": {"200": {"description": "json"}}}
        },
        "/v1/queues": {"get": _op("queues known to the engine")},
        q: {
            "get": _op("config, depth per state (depth by filter with ?meta.k=v), oldest pending age"),
            "put": _op(
                "replace the whole configuration (simple/exclusive, lease, attempts, filter keys, paused,"
                " retention, dedup policy)",
                body=_model(QueueConfigBody),
                errors={"400": "invalid config", "409": "would turn an exclusive queue simple (name mode)"},
            ),
            "patch": _op(
                "change only the fields given; the others keep their values",
                body=_model(QueuePatchBody),
                errors={"400": "invalid config"},
            ),
        },
        f"{q}/jobs": {
            "post": _op(
                "enqueue one job, a batch ({jobs: [...]}) or NDJSON; 202 once Kafka confirmed every job",
                "202",
                batch,
                errors={
                    "400": "invalid job (fields named)",
                    "404": "queue routed nowhere",
                    "409": "Idempotency-Key reused with another body",
                    "413": "too large",
                    "429": "gateway_busy: the process's in-flight body budget is full (Retry-After)",
                    "503": "Kafka did not confirm (Retry-After)",
                },
            )
        },
        "/v1/jobs": {
            "get": _op(
                "jobs the history has seen (live as of its last trigger, and archived), newest change first;"
                " filters queue, kind, state, since, until (ms), id_prefix; paged by limit and after",
                errors={"400": "a bad filter or cursor", "404": "no history tables here"},
            )
        },
        job: {
            "get": _op(
                "a job, live or finished: state, attempts with errors, timestamps, result; from the history"
                " (source: archive) once Redis forgot it",
                errors={"404": "no such job"},
            ),
            "delete": _op(
                "cancel / unschedule (a job still in Kafka is tombstoned); a finished job answers 200 with"
                " outcome already_<state> and changed=false"
            ),
        },
        f"{job}/replay": {
            "post": _op(
                "a new job from a finished or dead one (Idempotency-Key: the same replay twice is one job)",
                "202",
                errors={"404": "no such job", "409": "not finished"},
            )
        },
        f"{job}/extend": {"post": _op("extend a lease", body=_model(ExtendBody), errors=stale)},
        f"{job}/complete": {"post": _op("complete an attempt", body=_model(CompleteBody), errors=stale)},
        f"{job}/fail": {
            "post": _op("fail an attempt (retry, errored or canceled)", body=_model(FailBody), errors=stale)
        },
        f"{job}/release": {
            "post": _op(
                "give a held job back: pending again, its attempt refunded (an at_most_once job that started:"
                " errored)",
                body=_model(ReleaseBody),
                errors=stale,
                reply=ReleaseReply,
            )
        },
        f"{job}/snooze": {
            "post": _op(
                "put a held job back for delay_ms, no attempt spent",
                body=_model(SnoozeBody),
                errors=stale,
                reply=SnoozeReply,
            )
        },
        f"{job}/cancel": {
            "post": _op(
                "the worker cancels a job it holds: canceled, never retried",
                body=_model(CancelBody),
                errors=stale,
                reply=CancelReply,
            )
        },
        f"{q}/heartbeat": {
            "post": _op(
                "extend the leases of many held jobs in one call; per job whether it is still held",
                body=_model(HeartbeatBody),
                errors={"400": "invalid body (a job listed twice, more than 1000)"},
                reply=HeartbeatReply,
            )
        },
        f"{q}/claims": {
            "post": _op(
                "claim jobs (batch, lease, filter, long-poll) for a named worker; a graph node's job carries"
                " its parents' outcomes (graph); an answer holds at most JOBQ_GATE_CLAIM_REPLY_MAX_BYTES (the"
                " rest stay claimable)",
                body=_model(ClaimBody),
                errors={
                    "400": "filter on a key the queue does not index",
                    "429": "gateway_busy: the process's long-polls are all parked (Retry-After)",
                },
            )
        },
        f"{q}/dead": {
            "get": _op("dead-letter list (errored jobs)"),
            "delete": _op("purge dead letters (ids, or oldest up to limit)", body=_model(DeadBody)),
        },
        f"{q}/dead/retry": {"post": _op("retry dead letters", body=_model(DeadBody))},
        "/v1/kinds": {"get": _op("every configured job type, its defaults and per-queue options")},
        "/v1/kinds/{kind}": {
            "get": _op("one job type", errors={"404": "not configured"}),
            "put": _op("job type: concurrency, attempts, delivery strategy", body=_model(KindBody)),
        },
        "/v1/graphs": {
            "post": _op(
                "submit a task graph whole (any DAG, or a pipeline, chain, group + callback, map); 202 once"
                " Kafka has it; the same id again makes no second graph",
                "202",
                body=_GRAPH_IN,
                errors={"400": "invalid graph (each problem named)", "503": "Kafka unreachable"},
            )
        },
        "/v1/graphs/{graph}": {
            "get": _op("a graph: state, nodes, results, errors, timings", errors=no_graph)
        },
        "/v1/graphs/{graph}/cancel": {"post": _op("cancel a running graph and its nodes", errors=no_graph)},
        "/v1/graphs/{graph}/retry": {
            "post": _op(
                "run a failed or canceled graph again from what did not complete",
                errors={**no_graph, "409": "still running, or completed"},
            )
        },
        "/v1/cron": {"get": _op("every cron schedule with its last and next run")},
        "/v1/cron/{name}": {
            "get": _op("one cron schedule with its last and next run", errors=no_schedule),
            "put": _op(
                "create or replace a schedule (cron + tz, or every_s; queue, kind, args, misfire policy);"
                " its first slot comes after now",
                body=schedule_body_schema(),
                errors={"400": "invalid schedule (fields named)", "503": "Consul unreachable"},
            ),
            "delete": _op("remove a schedule (jobs already enqueued stay)", errors=no_schedule),
        },
        "/v1/cron/{name}/pause": {"post": _op("stop firing a schedule", errors=no_schedule)},
        "/v1/cron/{name}/resume": {"post": _op("fire from the next slot on", errors=no_schedule)},
        "/v1/cron/{name}/trigger": {
            "post": _op("enqueue one job of the schedule now", "202", errors=no_schedule)
        },
        "/v1/switches": {"get": _op("every kill switch in force")},
        "/v1/switches/{name}": {
            "put": _op(
                "put a kill switch in force (queue glob, kind, meta pairs; park or dead): matching jobs are"
                " not started from the answer on; a switch of the same name is replaced",
                body=_model(SwitchBody),
                errors={"400": "invalid switch (fields named)", "403": "needs the admin scope"},
            ),
            "delete": _op(
                "lift a kill switch: the jobs it parked are pending again",
                errors={"404": "no such switch in force", "403": "needs the admin scope"},
            ),
        },
    }
    for path, ops in paths.items():
        params = [_PATH_PARAMS[name] for name in re.findall(r"{(\w+)}", path)]
        for op in ops.values():
            if params:
                op["parameters"] = [*params, *op.get("parameters", [])]
    paths[f"{q}/dead"]["get"]["parameters"] += [
        {"name": "offset", "in": "query", "schema": {"type": "integer", "minimum": 0, "maximum": 2**53}},
        {"name": "limit", "in": "query", "schema": {"type": "integer", "minimum": 1, "maximum": 1000}},
    ]
    paths[job]["delete"]["parameters"].append({"name": "reason", "in": "query", "schema": {"type": "string"}})
    paths[f"{job}/replay"]["post"]["parameters"].append(
        {
            "name": "Idempotency-Key",
            "in": "header",
            "schema": {"type": "string", "minLength": 1, "maxLength": 255},
        }
    )
    return {
        "openapi": "3.1.0",
        "info": {"title": "jobq gateway (kafkagate)", "version": "1"},
        "security": [{"bearer": []}],
        "components": {
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
            "schemas": {"Error": _ERROR, "Job": _JOB_IN},
        },
        "paths": paths,
    }
