"""The gateway's OpenAPI 3.1 document, generated from the route declarations (:mod:`kafkagate.api`) and
the models (:mod:`kafkagate.models`, request bodies beside their handlers, :class:`jqruntime.http.ErrorBody`).

Served at ``/openapi.json``; ``docs/gateway.md``'s API reference is generated from it
(``docs/gen_api.py``). Every operation names the scope it needs (``security``, and ``x-jobq-scope``), its
body with an example, its success body and every error status it can answer, each with the one error body.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, cast

from pydantic import BaseModel
from pydantic.json_schema import JsonSchemaMode, models_json_schema

from jqcore import envelope_rules as rules
from jqruntime.http import ErrorBody
from kafkagate.api import Operation, statuses
from kafkagate.models import example_of

__all__ = ["build"]

REF = "#/components/schemas/{model}"
NAME = {"type": "string", "pattern": f"^{rules.ID_PATTERN}$"}
PATH_PARAMS: Mapping[str, Mapping[str, Any]] = {
    "queue": {"type": "string", "pattern": f"^{rules.QUEUE_PATTERN}$"},
    "id": NAME,
    "kind": NAME,
    "graph": {"type": "string", "pattern": "^[A-Za-z0-9][A-Za-z0-9_.-]{0,59}$"},
    "name": {"type": "string", "pattern": "^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$"},
}
RETRY_AFTER = {
    "Retry-After": {"description": "seconds to wait before retrying", "schema": {"type": "string"}}
}


def _models(ops: Sequence[Operation]) -> tuple[list[tuple[type[BaseModel], JsonSchemaMode]], Any]:
    wanted: dict[tuple[type[BaseModel], JsonSchemaMode], None] = {(ErrorBody, "serialization"): None}
    for op in ops:
        for model in _bodies(op.body):
            wanted[(model, "validation")] = None
        for answer in (op.answer, *op.also.values()):
            if answer is not None:
                wanted[(answer, "serialization")] = None
    keys = list(wanted)
    refs, defs = models_json_schema(keys, ref_template=REF)
    return keys, (refs, defs.get("$defs", {}))


def _bodies(body: object) -> tuple[type[BaseModel], ...]:
    if isinstance(body, tuple):
        return body
    return (body,) if isinstance(body, type) and issubclass(body, BaseModel) else ()


def _first_code(why: str) -> str:
    match = re.match(r"[a-z_]+", why)
    return match.group(0) if match else "error"


def build(ops: Sequence[Operation]) -> dict[str, Any]:
    """The OpenAPI document of ``ops``."""
    _, (refs, schemas) = _models(ops)

    def ref(model: type[BaseModel], mode: JsonSchemaMode) -> dict[str, Any]:
        return dict(refs[(model, mode)])

    paths: dict[str, dict[str, Any]] = {}
    seen: set[str] = set()
    for op in ops:
        name = op.operation_id
        if name in seen:
            raise ValueError(
                f"two operations are named {name!r}: give one an operation_id (kafkagate/api.py)"
            )
        seen.add(name)
        paths.setdefault(op.path, {})[op.method.lower()] = _operation(op, ref)
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "jobq gateway (kafkagate)",
            "version": "1",
            "description": "Errors: every 4xx/5xx answers the one JSON body ErrorBody, with a stable code.",
        },
        "security": [{"bearer": []}],
        "components": {
            "securitySchemes": {
                "bearer": {
                    "type": "http",
                    "scheme": "bearer",
                    "description": "a named token with scopes read, enqueue, work, admin (docs/security.md)",
                }
            },
            "schemas": schemas,
        },
        "paths": paths,
    }


def _operation(op: Operation, ref: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"operationId": op.operation_id, "tags": [op.tag], "summary": op.summary}
    doc = (op.handler.__doc__ or "").strip()
    if doc:
        out["description"] = " ".join(doc.split())
    if op.open:
        out["security"] = []
    else:
        scope = op.policy.scope
        out["security"] = [{"bearer": [scope]}]
        out["x-jobq-scope"] = scope
    params = [
        {"name": p, "in": "path", "required": True, "schema": dict(PATH_PARAMS[p])}
        for p in re.findall(r"{(\w+)}", op.path)
    ]
    params += [
        {
            "name": p.name,
            "in": p.where,
            "schema": dict(p.schema),
            **({"description": p.description} if p.description else {}),
        }
        for p in op.params
    ]
    if params:
        out["parameters"] = params
    if op.body is not None:
        out["requestBody"] = _request(op, ref)
    responses: dict[str, Any] = {str(op.ok): _success(op.answer, op.media, ref)}
    for status, model in op.also.items():
        responses[str(status)] = _success(model, "application/json", ref)
    error = ref(ErrorBody, "serialization")
    for status, why in statuses(op).items():
        answer: dict[str, Any] = {
            "description": why,
            "content": {
                "application/json": {
                    "schema": error,
                    "example": {
                        "error": {"code": _first_code(why), "message": why.partition(":")[2].strip()}
                    },
                }
            },
        }
        if status in (429, 503):
            answer["headers"] = RETRY_AFTER
        responses[str(status)] = answer
    out["responses"] = responses
    return out


def _request(op: Operation, ref: Any) -> dict[str, Any]:
    models = _bodies(op.body)
    if models:
        schema: dict[str, Any] = (
            ref(models[0], "validation")
            if len(models) == 1
            else {"oneOf": [ref(m, "validation") for m in models]}
        )
        example = op.body_example if op.body_example is not None else example_of(models[0])
    else:
        schema, example = dict(cast("Mapping[str, Any]", op.body)), op.body_example
    media: dict[str, Any] = {"schema": schema}
    if example is not None:
        media["example"] = example
    content = {"application/json": media}
    if op.method == "POST" and op.path.endswith("/jobs"):  # kafkagate.body.accepted_types
        content["application/x-ndjson"] = {
            "schema": {"type": "string", "description": "one job (JobIn) per line"},
            "example": '{"kind": "a"}\n{"kind": "b"}\n',
        }
    # a body-less call is read as {} by the routes whose fields all have defaults
    return {"required": not _all_optional(models), "content": content}


def _all_optional(models: Iterable[type[BaseModel]]) -> bool:
    found = list(models)
    return bool(found) and all(not f.is_required() for m in found for f in m.model_fields.values())


def _success(model: type[BaseModel] | None, media: str, ref: Any) -> dict[str, Any]:
    if model is None:  # not a model of this document: the metrics' text, this document itself
        schema = {"type": "object"} if media == "application/json" else {"type": "string"}
        return {"description": "success", "content": {media: {"schema": schema}}}
    description = (model.__doc__ or "").strip().split("\n\n")[0] or "success"
    if model.__doc__ is None or model.__doc__ == BaseModel.__doc__:
        description = "success"
    body: dict[str, Any] = {"schema": ref(model, "serialization")}
    example = example_of(model)
    if example is not None:
        body["example"] = example
    return {"description": " ".join(description.split()), "content": {media: body}}
