"""The gateway's generated OpenAPI document against its router and its own promises (no stack needed):
every route served is documented and every documented one served; every success declares a schema and
an example; every operation declares the statuses every route of its kind can answer, each with the one
error body; the examples are valid instances of their schemas; docs/gateway.md's reference is current."""

from __future__ import annotations

import importlib.util
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from aiohttp import web

from jqcore.errors import EnvelopeError, FieldError
from jqcore.routing import RoutingSettings
from jqengine import QueueConfig as EngineQueueConfig
from jqruntime.http import HttpError, error_body
from kafkagate.app import document, make_app
from kafkagate.enqueue import CLIENT_FIELDS
from kafkagate.models import JobIn, QueueConfig
from kafkagate.queue_bodies import QueueConfigBody
from kafkagate.settings import GateSettings
from kafkagate.state import Gate

ROOT = Path(__file__).resolve().parents[2]
AUTH_STATUSES = {"401", "403", "429", "503"}
BODY_STATUSES = {"400", "413", "415"}


def served(app: web.Application) -> set[tuple[str, str]]:
    """(method, path template) of every route of ``app`` (HEAD left out)."""
    out: set[tuple[str, str]] = set()
    for route in app.router.routes():
        info: Mapping[str, Any] = route.resource.get_info() if route.resource else {}
        path = info.get("path") or info.get("formatter")
        if path and route.method != "HEAD":
            out.add((route.method, path))
    return out


def operations(doc: dict[str, Any]) -> Iterator[tuple[str, str, dict[str, Any]]]:
    for path, ops in doc["paths"].items():
        for method, op in ops.items():
            yield method.upper(), path, op


def validator(doc: dict[str, Any], schema: dict[str, Any]) -> jsonschema.Draft202012Validator:
    return jsonschema.Draft202012Validator({**schema, "components": doc["components"]})


def test_every_route_of_the_app_is_documented_and_every_documented_one_is_served() -> None:
    unused: Any = None  # the routes only: nothing is connected or read
    app = make_app(Gate(GateSettings(), RoutingSettings(), *[unused] * 8))
    documented = {(method, path) for method, path, _ in operations(document())}
    assert served(app) - documented == set(), "routes served without a declaration (kafkagate/api.py)"
    assert documented - served(app) == set(), "documented routes the app does not serve"


def test_every_operation_declares_its_scope_success_schema_and_every_status_it_can_answer() -> None:
    doc = document()
    ids = [op["operationId"] for _, _, op in operations(doc)]
    assert len(ids) == len(set(ids)), "operation ids name the generated client's functions: unique"
    for method, path, op in operations(doc):
        where = f"{method} {path}"
        statuses = set(op["responses"])
        successes = [s for s in statuses if s.startswith("2")]
        assert successes, where
        for status in successes:
            (media,) = op["responses"][status]["content"].values()
            assert media["schema"], f"{where} {status} declares no schema"
        if op["security"]:
            assert statuses >= AUTH_STATUSES, f"{where} lacks {AUTH_STATUSES - statuses}"
            assert op["security"] == [{"bearer": [op["x-jobq-scope"]]}], where
        if method in ("POST", "PUT", "PATCH", "DELETE"):
            assert statuses >= BODY_STATUSES, f"{where} lacks {BODY_STATUSES - statuses}"
        if "{" in path:
            assert "400" in statuses, where
        for status in statuses - set(successes):
            answer = op["responses"][status]
            schema = answer["content"]["application/json"]["schema"]
            assert schema == {"$ref": "#/components/schemas/ErrorBody"}, f"{where} {status}"
            assert answer["description"], f"{where} {status} names no code"


def test_every_example_is_an_instance_of_its_schema() -> None:
    doc = document()
    checked = 0
    for method, path, op in operations(doc):
        request = op.get("requestBody", {}).get("content", {}).get("application/json")
        if request is not None:
            assert "example" in request, f"{method} {path}: a body without an example"
            validator(doc, request["schema"]).validate(request["example"])
            checked += 1
        for status, answer in op["responses"].items():
            for media in answer.get("content", {}).values():
                if "$ref" in media["schema"]:
                    assert "example" in media, f"{method} {path} {status}: no example"
                    validator(doc, media["schema"]).validate(media["example"])
                    checked += 1
    assert checked > 250, checked


def test_the_error_body_schema_is_what_the_gateway_answers() -> None:
    doc = document()
    schema = validator(doc, {"$ref": "#/components/schemas/ErrorBody"})
    refusals = [
        HttpError(429, "rate_limited", "slow down", details={"token": "t", "retry_after_s": 2}),
        EnvelopeError([FieldError("jobs[0].meta", "must be an object, got string")]),
        HttpError(404, "job_not_found", "no job"),
    ]
    for exc in refusals:
        schema.validate(error_body(exc))
    assert not schema.is_valid({"error": {"message": "no code"}})


def test_the_enqueue_model_names_exactly_the_fields_the_gateway_reads() -> None:
    assert set(JobIn.model_fields) == set(CLIENT_FIELDS)


def test_the_queue_config_models_name_exactly_the_engines_fields() -> None:
    """The answer's model and the PUT body follow the engine's configuration (open models would let a
    new field go undeclared)."""
    fields = set(EngineQueueConfig().as_dict())
    assert set(QueueConfig.model_fields) == fields
    assert set(QueueConfigBody.model_fields) == fields


def test_docs_gateway_md_holds_the_reference_generated_from_the_document() -> None:
    spec = importlib.util.spec_from_file_location("gen_api", ROOT / "docs" / "gen_api.py")
    assert spec is not None
    assert spec.loader is not None
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    current = gen.DOC.read_text()
    assert gen.render(current, document()) == current, "run `python docs/gen_api.py`"


@pytest.mark.parametrize("field", ["kind", "meta", "lease_ms"])
def test_the_enqueue_limits_are_the_envelopes(field: str) -> None:
    """The document's limits are jqcore.envelope_rules' (a change there changes the contract)."""
    from jqcore import envelope_rules as rules

    schema = document()["components"]["schemas"]["JobIn"]["properties"][field]
    text = str(schema)
    expected = {
        "kind": rules.ID_PATTERN,
        "meta": str(rules.MAX_META_ENTRIES),
        "lease_ms": str(rules.MAX_LEASE_MS),
    }[field]
    assert expected in text, (field, schema)


def test_a_new_route_is_documented_by_its_declaration_and_cannot_be_served_without_one() -> None:
    from jqruntime.authz import Policy, path_queue
    from kafkagate.api import Api
    from kafkagate.models import Completed
    from kafkagate.openapi import build
    from kafkagate.workmodels import Owner

    table = Api("claims")

    work = Policy("work", (path_queue,))

    @table.post(
        "/v1/queues/{queue}/jobs/{id}/release", policy=work, summary="release", body=Owner, answer=Completed
    )
    async def release(request: web.Request) -> web.Response:
        raise NotImplementedError

    path = "/v1/queues/{queue}/jobs/{id}/release"
    op = build(table.operations)["paths"][path]["post"]
    assert (op["operationId"], op["tags"]) == ("release", ["claims"])
    assert op["x-jobq-scope"] == "work", "the scope the door checks"
    assert set(op["responses"]) == {"200", "400", "401", "403", "413", "415", "429", "503"}
    with pytest.raises(TypeError, match="declare its policy, summary, answer"):
        table.post("/v1/queues/{queue}/jobs/{id}/snooze")
