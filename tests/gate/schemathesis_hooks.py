"""Schemathesis checks of the gateway's error promise, loaded by the CLI through ``SCHEMATHESIS_HOOKS``.

``refusal_is_json_with_code``: every 4xx/5xx response is ``application/json`` holding
``{"error": {"code": <non-empty string>, "message": <string>}}`` — never aiohttp's text page.
"""

from __future__ import annotations

import json
from typing import Any

import schemathesis


@schemathesis.serializer("application/x-ndjson")
def ndjson(ctx: Any, value: Any) -> bytes:
    """An enqueue's NDJSON body (the document gives it as a string of lines)."""
    return value.encode() if isinstance(value, str) else json.dumps(value).encode() + b"\n"


@schemathesis.check
def refusal_is_json_with_code(ctx: Any, response: Any, case: Any) -> None:
    if response.status_code < 400:
        return
    headers = {k.lower(): v for k, v in response.headers.items()}  # names as sent; values: lists
    given = headers.get("content-type", "")
    content_type = str(given[0] if isinstance(given, list) and given else given)
    if not content_type.startswith("application/json"):
        raise AssertionError(f"{response.status_code} answered with {content_type!r}, not JSON")
    error = response.json().get("error") if isinstance(response.json(), dict) else None
    if not isinstance(error, dict) or not isinstance(error.get("code"), str) or not error["code"]:
        raise AssertionError(f"{response.status_code} without an error code: {response.text[:300]!r}")
    if not isinstance(error.get("message"), str):
        raise AssertionError(f"{response.status_code} without an error message: {response.text[:300]!r}")
