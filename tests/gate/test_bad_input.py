"""Bad input against the live gateway (the ``gw`` fixture: a real GateService on the session's Kafka and
Redis): every class of request that can never succeed is a 4xx with a JSON body and a stable ``code``,
never a 5xx and never a 503 (which would tell the client to retry), and nothing reaches Kafka.

One test per class: too large for the gateway, too large for Kafka, partition out of range, content
codings, media types, exclusive queues without an exclusivity value, malformed JSON, odd headers, and the
error shape of everything else (unknown routes, methods, unexpected exceptions)."""

from __future__ import annotations

import asyncio
import gzip
import io
import secrets
import zlib
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any
from urllib.parse import urlsplit

import aiohttp
import orjson
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer
from confluent_kafka.admin import AdminClient, NewTopic

from jqcore.envelope import KAFKA_MAX_MESSAGE_BYTES, MAX_ENVELOPE_BYTES, decode
from jqcore.settings.kafka import KafkaSettings
from jqcore.settings.observe import TraceSettings
from jqcore.settings.pipeline import CronSettings, FarSettings, HistorySettings
from jqcore.settings.servers import ConsulSettings, RedisSettings
from jqruntime.http import error_middleware
from jqstack.manager import Endpoints
from kafkagate.main import GateService
from kafkagate.settings import GateSettings

Reply = tuple[int, dict[str, str], Any]


async def send(gw: Any, method: str, path: str, body: Any = b"", **headers: str) -> Reply:
    """One request on its own connection (a refused body may leave the connection closed)."""
    kw: dict[str, Any] = {"data": io.BytesIO(body) if isinstance(body, bytes) else body}
    if "Content-Type" not in headers:
        kw["skip_auto_headers"] = ["Content-Type"]  # no Content-Type at all: the API reads JSON
    auth = {"Authorization": gw.http.headers["Authorization"]}
    connector = aiohttp.TCPConnector(force_close=True)
    async with (
        aiohttp.ClientSession(headers=auth, connector=connector, auto_decompress=False) as http,
        http.request(method, gw.url + path, headers=headers, **kw) as resp,
    ):
        raw = await resp.read()
        body_out = orjson.loads(raw) if resp.content_type == "application/json" else raw
        return resp.status, dict(resp.headers), body_out


async def send_raw(gw: Any, head: str, body: bytes = b"") -> Reply:
    """Bytes on a socket, for what an HTTP client will not send (absurd or missing headers)."""
    url = urlsplit(gw.url)
    reader, writer = await asyncio.open_connection(url.hostname, url.port)
    try:
        token = gw.http.headers["Authorization"]
        writer.write(f"{head}\r\nHost: gw\r\nAuthorization: {token}\r\n\r\n".encode() + body)
        await writer.drain()
        lines = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1").split("\r\n")
        headers = {k.strip().lower(): v.strip() for k, _, v in (ln.partition(":") for ln in lines[1:] if ln)}
        raw = await reader.readexactly(int(headers.get("content-length", "0")))
    finally:
        writer.close()
    is_json = headers.get("content-type", "").startswith("application/json")
    return int(lines[0].split()[1]), headers, orjson.loads(raw) if is_json else raw


def refused(reply: Reply, status: int, code: str) -> dict[str, Any]:
    """The reply is ``status`` with a JSON error of ``code``; returns the error object."""
    got, headers, body = reply
    assert isinstance(body, dict), f"{got}: not JSON: {body!r}"
    assert (got, body["error"]["code"]) == (status, code), body
    assert isinstance(body["error"]["message"], str)
    assert body["error"]["message"]
    assert "Retry-After" not in headers, "a request that can never succeed must not be told to retry"
    error: dict[str, Any] = body["error"]
    return error


def jobs_path(gw: Any) -> str:
    return f"/v1/queues/{gw.queue}/jobs"


def job(**fields: Any) -> bytes:
    return orjson.dumps({"kind": "k", **fields})


# ---- 1. too large for the gateway's limit set --------------------------------------------------------


async def test_a_job_over_the_size_limit_is_a_413_before_anything_is_produced(
    gw: Any, topic_end: Callable[[str], int], topic_reader: Callable[..., list[Any]]
) -> None:
    big = "x" * MAX_ENVELOPE_BYTES
    error = refused(await send(gw, "POST", jobs_path(gw), job(args=big)), 413, "job_too_large")
    assert error["fields"][0]["field"] == "$"
    assert error["limit_bytes"] == MAX_ENVELOPE_BYTES
    assert error["jobs"][0]["index"] == 0
    assert error["jobs"][0]["bytes"] > MAX_ENVELOPE_BYTES

    batch = orjson.dumps({"jobs": [{"kind": "small"}, {"kind": "big", "args": big}]})
    error = refused(await send(gw, "POST", jobs_path(gw), batch), 413, "job_too_large")
    assert [f["field"] for f in error["fields"]] == ["jobs[1]"], "the whole batch is refused, job 1 named"
    assert "jobs[1]" in error["message"]
    assert str(MAX_ENVELOPE_BYTES) in error["message"]
    assert topic_end(gw.topic) == 0, "nothing was produced"

    # the largest jobs fit every other limit of the set: the producer's, the topic's, the broker's
    largest = secrets.token_urlsafe(MAX_ENVELOPE_BYTES)[: MAX_ENVELOPE_BYTES - 400]
    status, _, body = await send(gw, "POST", jobs_path(gw), job(args=largest))
    assert status == 202, body
    (msg,) = topic_reader(gw.topic, 1)
    assert 1_000_000 < len(msg.value()) <= MAX_ENVELOPE_BYTES < KAFKA_MAX_MESSAGE_BYTES
    assert decode(msg.value()).args == largest


# ---- 2. too large for a topic made elsewhere with a smaller limit ------------------------------------


@pytest.fixture
def small_topic(kafka_admin: AdminClient, prefix: str) -> Iterator[str]:
    """A topic whose max.message.bytes (20 kB) is far below jobq's, as if made outside jobq."""
    name = f"{prefix}.small"
    config = {"max.message.bytes": "20000"}
    kafka_admin.create_topics([NewTopic(name, 1, 1, config=config)], operation_timeout=15)[name].result(20)
    yield name
    kafka_admin.delete_topics([name], operation_timeout=15)[name].result(20)


async def test_kafka_refusing_a_record_for_size_is_a_413_not_a_503(
    gw: Any, small_topic: str, make_gate: Callable[..., GateService], routing_for: Any
) -> None:
    async with make_gate(routing_for(small_topic)) as svc:
        gw.service = svc
        noise = secrets.token_urlsafe(60_000)  # incompressible enough that lz4 cannot shrink it under 20 kB
        error = refused(await send(gw, "POST", jobs_path(gw), job(args=noise)), 413, "job_too_large")
        assert error["fields"][0]["field"] == "$"
        assert error["limit_bytes"] is None
        assert "Kafka refused it" in error["message"]
        status, _, body = await send(gw, "POST", jobs_path(gw), job(args="small"))
        assert status == 202, body


# ---- 3. explicit partition outside the topic ---------------------------------------------------------


async def test_a_partition_the_topic_does_not_have_is_a_400(gw: Any, topic_end: Callable[[str], int]) -> None:
    error = refused(await send(gw, "POST", jobs_path(gw), job(partition=3)), 400, "partition_invalid")
    assert error["fields"] == [{"field": "partition", "problem": "the topic has partitions 0-2"}]
    batch = orjson.dumps({"jobs": [{"kind": "k", "partition": 0}, {"kind": "k", "partition": 2**40}]})
    error = refused(await send(gw, "POST", jobs_path(gw), batch), 400, "partition_invalid")
    assert [f["field"] for f in error["fields"]] == ["jobs[1].partition"]
    assert topic_end(gw.topic) == 0, "nothing was produced"
    status, _, body = await send(gw, "POST", jobs_path(gw), job(partition=2))
    assert (status, body["jobs"][0]["partition"]) == (202, 2)


# ---- 4. content codings ------------------------------------------------------------------------------


async def test_content_encodings_decode_or_are_refused_with_a_code(gw: Any) -> None:
    one = job(args={"n": 1})
    raw_deflate = zlib.compressobj(wbits=-zlib.MAX_WBITS)
    for coding, body in [
        ("gzip", gzip.compress(one)),
        ("GZIP", gzip.compress(one[:5]) + gzip.compress(one[5:])),  # two members, any case
        ("deflate", zlib.compress(one)),
        ("deflate", raw_deflate.compress(one) + raw_deflate.flush()),  # raw deflate, as some clients send
        ("identity", one),
    ]:
        status, _, reply = await send(gw, "POST", jobs_path(gw), body, **{"Content-Encoding": coding})
        assert status == 202, (coding, reply)
    for coding, body in [
        ("gzip", one),  # a lie: the body is plain JSON
        ("gzip", gzip.compress(one)[:-12]),  # truncated
        ("deflate", one),
        ("deflate", zlib.compress(one) + b"trailing"),
    ]:
        reply = await send(gw, "POST", jobs_path(gw), body, **{"Content-Encoding": coding})
        refused(reply, 400, "body_undecodable")
    for coding in ("br", "zstd", "compress", "x-gzip", "gzip, gzip", "gzip;q=1", "bogus"):
        reply = await send(gw, "POST", jobs_path(gw), gzip.compress(one), **{"Content-Encoding": coding})
        error = refused(reply, 415, "content_encoding_unsupported")
        assert "identity, gzip, deflate" in error["message"]
    bomb = gzip.compress(b" " * (gw.service.settings.max_body_bytes + 1))  # ~8 kB on the wire
    refused(
        await send(gw, "POST", jobs_path(gw), bomb, **{"Content-Encoding": "gzip"}), 413, "body_too_large"
    )
    # the other endpoints read their bodies the same way
    status, _, reply = await send(
        gw,
        "PUT",
        f"/v1/queues/{gw.queue}",
        gzip.compress(b'{"lease_ms": 5000}'),
        **{"Content-Encoding": "gzip"},
    )
    assert (status, reply["config"]["lease_ms"]) == (200, 5000)
    reply = await send(gw, "PUT", f"/v1/queues/{gw.queue}", b"{}", **{"Content-Encoding": "br"})
    refused(reply, 415, "content_encoding_unsupported")


# ---- 5. media types ----------------------------------------------------------------------------------


async def test_media_types_the_api_does_not_read_are_a_415(gw: Any) -> None:
    one = job()
    for content_type in (
        "application/json",
        "application/json; charset=UTF-8",
        'application/json; foo="a;b"; q=1',
        "Application/JSON",
        "application/x-ndjson",
    ):
        status, _, body = await send(gw, "POST", jobs_path(gw), one, **{"Content-Type": content_type})
        assert status == 202, (content_type, body)
    status, _, body = await send(gw, "POST", jobs_path(gw), one)  # no Content-Type: JSON
    assert status == 202, body
    for content_type in (
        "text/plain",
        "application/x-www-form-urlencoded",
        "multipart/form-data; boundary=x",
        "application/octet-stream",
        "application/xml",
        ";;;",
    ):
        reply = await send(gw, "POST", jobs_path(gw), one, **{"Content-Type": content_type})
        error = refused(reply, 415, "content_type_unsupported")
        assert "application/json" in error["message"]
        assert "application/x-ndjson" in error["message"]
    for charset in ("utf-16", "latin-1", "bogus"):
        body16 = '{"kind": "k"}'.encode("utf-16") if charset == "utf-16" else one
        ct = f"application/json; charset={charset}"
        refused(
            await send(gw, "POST", jobs_path(gw), body16, **{"Content-Type": ct}),
            415,
            "content_type_unsupported",
        )
    # the rule holds for every endpoint with a body
    for method, path in [
        ("PUT", f"/v1/queues/{gw.queue}"),
        ("PATCH", f"/v1/queues/{gw.queue}"),
        ("POST", f"/v1/queues/{gw.queue}/claims"),
        ("PUT", "/v1/kinds/k"),
    ]:
        reply = await send(gw, method, path, b"{}", **{"Content-Type": "text/plain"})
        error = refused(reply, 415, "content_type_unsupported")
        assert "application/x-ndjson" not in error["message"]
    # a Content-Type one route took (NDJSON, at the enqueue above) is still refused where it is not read
    reply = await send(gw, "PUT", f"/v1/queues/{gw.queue}", b"{}", **{"Content-Type": "application/x-ndjson"})
    refused(reply, 415, "content_type_unsupported")
    status, _, body = await send(
        gw,
        "PATCH",
        f"/v1/queues/{gw.queue}",
        b'{"paused": false}',
        **{"Content-Type": "application/merge-patch+json"},
    )
    assert status == 200, body


# ---- 6. exclusive queues -----------------------------------------------------------------------------


async def test_an_exclusive_queue_refuses_jobs_without_an_exclusivity_value(
    gw: Any, topic_end: Callable[[str], int], make_gate: Callable[..., GateService], routing_for: Any
) -> None:
    config = orjson.dumps({"mode": "exclusive", "excl_key": "account"})
    status, _, body = await send(gw, "PUT", f"/v1/queues/{gw.queue}", config)
    assert status == 200, body
    error = refused(await send(gw, "POST", jobs_path(gw), job()), 400, "excl_missing")
    assert error["fields"] == [
        {"field": "excl", "problem": "the queue is exclusive: give excl or meta.account"}
    ]
    batch = orjson.dumps({"jobs": [{"kind": "k", "excl": "a1"}, {"kind": "k", "meta": {"other": "x"}}]})
    error = refused(await send(gw, "POST", jobs_path(gw), batch), 400, "excl_missing")
    assert [f["field"] for f in error["fields"]] == ["jobs[1].excl"]
    assert topic_end(gw.topic) == 0, "nothing was produced"
    for ok in (job(excl="a1"), job(meta={"account": "a2"})):
        status, _, body = await send(gw, "POST", jobs_path(gw), ok)
        assert status == 202, body

    # the gateway that takes the PUT forgets the configuration it cached: the queue is exclusive at once
    async with make_gate(routing_for(gw.topic)) as svc:
        gw.service = svc
        later = f"{gw.queue}.later"
        status, _, body = await send(gw, "POST", f"/v1/queues/{later}/jobs", job())
        assert status == 202, body
        status, _, body = await send(gw, "PUT", f"/v1/queues/{later}", config)
        assert status == 200, body
        refused(await send(gw, "POST", f"/v1/queues/{later}/jobs", job()), 400, "excl_missing")


async def test_without_redis_the_exclusivity_check_is_skipped_and_the_job_accepted(
    endpoints: Endpoints, prefix: str, make_topic: Callable[..., str], routing_for: Any, token: str
) -> None:
    """Enqueues never depend on Redis: the relay still dead-letters a job an exclusive queue cannot take.
    An admin call, which Redis answers and the audit trail records there, is a 503 with its code — not the
    500 a fault run saw when the audit record met a Redis that did not answer."""
    topic = make_topic("jobs")
    service = GateService(
        GateSettings(port=0, tokens=[token]),
        routing_for(topic),
        KafkaSettings(bootstrap=endpoints.kafka_bootstrap),
        RedisSettings(url="redis://127.0.0.1:1/0"),  # nothing listens there
        ConsulSettings(addr=endpoints.consul_addr),
        CronSettings(),
        FarSettings(),
        HistorySettings(path="/nonexistent/jobq-history"),
        TraceSettings(),
    )
    async with (
        service,
        aiohttp.ClientSession(headers={"Authorization": f"Bearer {token}"}) as http,
    ):
        async with http.post(f"{service.url}/v1/queues/{prefix}.q/jobs", json={"kind": "k"}) as resp:
            assert resp.status == 202, await resp.text()
        async with http.delete(f"{service.url}/v1/queues/{prefix}.q/jobs/j1") as resp:
            body = await resp.json()
            assert (resp.status, body["error"]["code"]) == (503, "backend_unavailable"), body


# ---- 7. malformed JSON -------------------------------------------------------------------------------

BODIES: list[tuple[str, bytes, str]] = [
    ("null", b"null", "envelope_invalid"),
    ("empty array", b"[]", "envelope_invalid"),
    ("a number", b"42", "envelope_invalid"),
    ("a string", b'"job"', "envelope_invalid"),
    ("true", b"true", "envelope_invalid"),
    ("no kind", b"{}", "envelope_invalid"),
    ("jobs not an array", b'{"jobs": {}}', "body_invalid"),
    ("jobs holding null", b'{"jobs": [null]}', "envelope_invalid"),
    ("no jobs", b'{"jobs": []}', "body_empty"),
    ("empty", b"", "body_empty"),
    ("whitespace", b" \r\n\t ", "body_empty"),
    ("NaN", b'{"kind": "k", "args": NaN}', "body_not_json"),
    ("Infinity", b'{"kind": "k", "args": [Infinity, -Infinity]}', "body_not_json"),
    ("a float overflowing", b'{"kind": "k", "args": 1e999}', "body_not_json"),
    (
        "an integer beyond 64 bits",
        b'{"kind": "k", "priority": 123456789012345678901234567890}',
        "envelope_invalid",
    ),
    ("invalid UTF-8", b'{"kind": "k", "args": "\xff\xfe"}', "body_not_json"),
    ("lone surrogate escape", b'{"kind": "k", "args": "\\ud800"}', "body_not_json"),
    ("lone surrogate bytes", b'{"kind": "k", "args": "\xed\xa0\x80"}', "body_not_json"),
    ("NUL in a name", b'{"kind": "k\\u0000"}', "envelope_invalid"),
    ("byte order mark", b'\xef\xbb\xbf{"kind": "k"}', "body_not_json"),
    ("truncated", b'{"kind": "k"', "body_not_json"),
    ("nested past orjson's limit", b"[" * 2000 + b"]" * 2000, "body_not_json"),
    (
        "args nested past the envelope's limit",
        b'{"kind": "k", "args": ' + b"[" * 100 + b"]" * 100 + b"}",
        "envelope_invalid",
    ),
    ("unknown field", b'{"kind": "k", "kinds": 1}', "envelope_invalid"),
]


@pytest.mark.parametrize(("body", "code"), [(b, c) for _, b, c in BODIES], ids=[n for n, _, _ in BODIES])
async def test_malformed_json_is_a_400_with_a_code(gw: Any, body: bytes, code: str) -> None:
    refused(await send(gw, "POST", jobs_path(gw), body, **{"Content-Type": "application/json"}), 400, code)


async def test_json_edge_cases_the_api_accepts(gw: Any, topic_reader: Callable[..., list[Any]]) -> None:
    """Duplicate keys: the last wins (what Kafka carries is re-encoded, so no reader sees two)."""
    status, _, body = await send(gw, "POST", jobs_path(gw), b'{"kind": "first", "kind": "last"}')
    assert status == 202, body
    (msg,) = topic_reader(gw.topic, 1)
    assert decode(msg.value()).kind == "last"
    assert msg.value().count(b'"kind"') == 1
    ndjson = b'{"kind": "k"}\n\n{"kind": "k"}\n'
    status, _, body = await send(
        gw, "POST", jobs_path(gw), ndjson, **{"Content-Type": "application/x-ndjson"}
    )
    assert (status, len(body["ids"])) == (202, 2)
    bad_line = b'{"kind": "k"}\n{"kind": \n'
    reply = await send(gw, "POST", jobs_path(gw), bad_line, **{"Content-Type": "application/x-ndjson"})
    assert "line 2" in refused(reply, 400, "body_not_json")["message"]


# ---- 8. odd headers ----------------------------------------------------------------------------------


async def test_odd_headers_never_get_a_server_error(gw: Any) -> None:
    path = jobs_path(gw)

    async def chunks() -> AsyncIterator[bytes]:
        for part in (b'{"kind"', b': "k", "args": ', b"[1, 2]}"):
            yield part

    status, _, body = await send(gw, "POST", path, chunks())  # Transfer-Encoding: chunked
    assert status == 202, body
    status, _, body = await send(gw, "POST", path, gzip.compress(job()), **{"Content-Encoding": "gzip"})
    assert status == 202, body

    absurd = await send_raw(gw, f"POST {path} HTTP/1.1\r\nContent-Length: {10**15}", job())
    assert "limit" in refused(absurd, 413, "body_too_large")["message"]
    bad_key = await send_raw(
        gw, f"POST {path} HTTP/1.1\r\nIdempotency-Key: {'k' * 300}\r\nContent-Length: 13", b'{"kind": "k"}'
    )
    refused(bad_key, 400, "idempotency_key_invalid")
    no_type = await send_raw(gw, f"POST {path} HTTP/1.1\r\nContent-Length: 13", b'{"kind": "k"}')
    assert no_type[0] == 202, no_type

    # Not an HTTP message at all (framing that contradicts itself, or bytes after the body that are no
    # request): aiohttp's parser answers a plain 400 and closes the connection before any route or
    # middleware runs — still a 4xx, never a 5xx.
    both = await send_raw(
        gw, f"POST {path} HTTP/1.1\r\nContent-Length: 13\r\nTransfer-Encoding: chunked", b'{"kind": "k"}'
    )
    short = await send_raw(gw, f"POST {path} HTTP/1.1\r\nContent-Length: 5", b'{"kind": "k"}')
    assert (both[0], short[0]) == (400, 400)


# ---- 9. the error shape of everything else -----------------------------------------------------------


async def test_unknown_routes_and_methods_are_json(gw: Any) -> None:
    refused(await send(gw, "GET", "/nope"), 404, "not_found")
    status, headers, body = await send(gw, "DELETE", "/v1/queues")
    assert (status, body["error"]["code"]) == (405, "method_not_allowed")
    assert "GET" in headers["Allow"]
    refused(await send(gw, "GET", "/v1/queues/Not_A_Queue"), 400, "queue_invalid")


async def test_an_unexpected_exception_is_a_json_500_and_logged(capsys: pytest.CaptureFixture[str]) -> None:
    async def boom(_: web.Request) -> web.Response:
        raise RuntimeError("secret detail")

    app = web.Application(middlewares=[error_middleware("the gateway")])
    app.router.add_get("/boom", boom)
    async with (
        TestServer(app) as server,
        aiohttp.ClientSession() as http,
        http.get(server.make_url("/boom")) as r,
    ):
        body = await r.json()
        assert (r.status, r.content_type, body["error"]["code"]) == (
            500,
            "application/json",
            "internal_error",
        )
        assert "secret detail" not in body["error"]["message"], "internals stay in the log"
        assert "Retry-After" not in r.headers
    assert "RuntimeError: secret detail" in capsys.readouterr().err, "the traceback is logged"
