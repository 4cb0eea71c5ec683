"""Type confusion against a real gateway: every field of every request body of ``/openapi.json`` (and each
body as a whole) given every JSON type is answered a 4xx with a ``code`` or a 2xx — never a 5xx — and
whenever the document's schema refuses the body, the gateway refuses it too (a 4xx): the contract is no
looser than the server; and each answer's status is declared and its body fits the declared schema.
~800 requests on one gateway, 16 at a time (a few seconds)."""

from __future__ import annotations

import asyncio
import contextlib
import copy
from collections.abc import Iterator
from typing import Any

import jsonschema
import orjson

from jqengine import Engine, SwitchNotFound
from kafkagate.app import document

JSON = {"Content-Type": "application/json"}
JSON_TYPES: tuple[Any, ...] = (None, True, 7, 1.5, "ab", [1], {"k": "v"})
"""One value of each JSON type (a 2-character string and a list: what made ``dict(meta)`` raise)."""


def cases(doc: dict[str, Any], names: dict[str, str]) -> Iterator[tuple[str, str, str, Any, Any]]:
    """(method, path, field, body, operation) for each body field of each operation given each JSON type,
    and for each body given each JSON type instead of an object."""
    components = doc["components"]
    for template, ops in doc["paths"].items():
        path = template.format(**names)
        for method, op in ops.items():
            content = op.get("requestBody", {}).get("content", {}).get("application/json")
            if content is None:
                continue
            for value in JSON_TYPES:
                yield method.upper(), path, "$", value, op
            base = content["example"]
            for name in _fields(content["schema"], components):
                for value in JSON_TYPES:
                    body = copy.deepcopy(base)
                    body[name] = value
                    yield method.upper(), path, name, body, op


def _fields(schema: dict[str, Any], components: dict[str, Any]) -> list[str]:
    """The properties of a body's schema (of each alternative of a oneOf)."""
    options = schema.get("oneOf", [schema])
    names: list[str] = []
    for option in options:
        if "$ref" in option:
            option = components["schemas"][option["$ref"].rsplit("/", 1)[1]]
        names += [n for n in option.get("properties", {}) if n not in names]
    return names


def lenient(path: str, field: str, body: Any) -> bool:
    """What the gateway takes beyond its schema, on purpose or by history (kept: existing clients may send
    it): pydantic's lax mode reads ``true`` as 1 for an integer field, and an enqueue reads a ``canary``
    that is not ``true`` as false."""
    value = body.get(field) if isinstance(body, dict) else None
    return value is True or (field == "canary" and path.endswith("/jobs"))


def adjusted(path: str, field: str, body: Any, queue: str, prefix: str) -> Any:
    """The case's body, kept inside the test: its own queue and graph id, no long-poll."""
    if not isinstance(body, dict):
        return body
    if path.startswith("/v1/graphs") and isinstance(body.get("chain"), list):
        body = {**body, "queue": queue, "id": f"{prefix}-g"}  # nodes in the test's own queue
    if path.endswith("/claims") and field != "wait_ms":
        body = {**body, "wait_ms": 0}  # the example's long-poll would park each claim of an empty queue
    if path.startswith("/v1/cron/") and body.get("queue") == "default":
        body = {**body, "queue": queue}
    return body


def verdict(
    doc: dict[str, Any], case: tuple[str, str, str, Any, Any], status: int, answer: Any
) -> str | None:
    """What is wrong with ``answer`` to ``case`` (None: nothing)."""
    method, path, field, body, op = case

    def valid(schema: dict[str, Any], value: Any) -> bool:
        return jsonschema.Draft202012Validator({**schema, "components": doc["components"]}).is_valid(value)

    where = f"{method} {path} {orjson.dumps(body)[:200]!r} -> {status} {str(answer)[:300]}"
    declared = op["responses"].get(str(status))
    if status >= 500:
        return "server error: " + where
    if status >= 400 and not (isinstance(answer, dict) and answer.get("error", {}).get("code")):
        return "no code: " + where
    if declared is None:
        return "a status the document does not declare: " + where
    if not valid(declared["content"]["application/json"]["schema"], answer):
        return "an answer its schema refuses: " + where
    request = op["requestBody"]["content"]["application/json"]["schema"]
    if status < 400 and not valid(request, body) and not lenient(path, field, body):
        return "accepted what the schema refuses: " + where
    return None


async def test_every_field_given_every_json_type_is_a_4xx_with_a_code_never_a_5xx(
    gw: Any, engine: Engine, prefix: str
) -> None:
    doc = document()
    names = {"queue": gw.queue, "id": f"{prefix}-job", "kind": f"{prefix}.kind", "graph": f"{prefix}-g"}
    names["name"] = f"{prefix}-sw"
    todo = [
        (method, path, field, adjusted(path, field, body, gw.queue, prefix), op)
        for method, path, field, body, op in cases(doc, names)
    ]
    assert len(todo) > 500, len(todo)
    limit = asyncio.Semaphore(16)
    statuses: list[int] = []

    async def one(case: tuple[str, str, str, Any, Any]) -> str | None:
        async with limit:
            status, answer = await gw.call(case[0], case[1], data=orjson.dumps(case[3]), headers=JSON)
        statuses.append(status)
        return verdict(doc, case, status, answer)

    try:
        found = await asyncio.gather(*(one(case) for case in todo))
    finally:
        for switch in await engine.admin.switches():  # the switches valid bodies put in force
            if switch.name.startswith(prefix):
                with contextlib.suppress(SwitchNotFound):
                    await engine.admin.lift_switch(switch.name)
    problems = [p for p in found if p is not None]
    accepted = sum(1 for s in statuses if s < 300)
    assert accepted > 100, f"only {accepted} bodies accepted: the cases must reach the handlers"
    assert not problems, f"{len(problems)} of {len(todo)}:\n" + "\n".join(problems[:40])


async def test_a_job_whose_meta_is_not_an_object_is_a_400_naming_meta(gw: Any) -> None:
    """Was a 500 internal_error (``dict(meta)`` raised ValueError on a string or a list)."""
    for meta in ("ab", ["ab"], [["k", "v"]], 3, True, ""):
        for body in ({"kind": "k", "meta": meta}, {"jobs": [{"kind": "k", "meta": meta}]}):
            status, answer = await gw.call("POST", f"/v1/queues/{gw.queue}/jobs", json=body)
            assert status == 400, (meta, answer)
            assert answer["error"]["code"] == "envelope_invalid", answer
            (problem,) = answer["error"]["fields"]
            assert problem["field"] in ("meta", "jobs[0].meta"), problem
            assert "must be an object" in problem["problem"], problem
