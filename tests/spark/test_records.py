"""Spark-built records against the gateway's: same envelope, key, topic and headers; ids deterministic;
rows the relay would dead-letter fail the Spark job instead. No Kafka needed here."""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime
from pathlib import Path

import orjson
import pytest
from pyspark.errors import SparkRuntimeException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as sf

from jqcore.envelope import Envelope, decode, new_envelope
from jqcore.errors import EnvelopeError
from jqcore.routing import QueueUnrouted, Route, RoutingSettings
from jqspark import ID_PREFIX, SparkSetupError, connector_jars, to_kafka_records
from jqstack.provision import ensure_spark_jars
from kafkagate.enqueue import build_records, parse_jobs

pytestmark = pytest.mark.spark

AT = 1_700_000_000_000
ROUTING = RoutingSettings(
    routes=[Route(queues="mail*", topic="jobs.mail"), Route(queues="img.*", topic="jobs.img", acks="leader")],
    default_topic="jobs.default",
)
ROW_SCHEMA = (
    "queue string, kind string, user long, subject string, note string, tags array<string>, "
    "opts map<string,int>, prio long, run_at timestamp, region string, tier string, account string"
)


def golden_row(spark: SparkSession) -> DataFrame:
    run_at = datetime.fromtimestamp((AT + 60_000) / 1000, UTC)
    row = ("mail.eu", "email.send", 42, 'Hé "there"\n\t\\ ✓', None, ["a", "b"], {"x": 1}, 7, run_at)
    return spark.createDataFrame([(*row, "eu", "", "acct-9")], ROW_SCHEMA)


def spark_records(df: DataFrame, **kw: object) -> list[dict[str, object]]:
    out = to_kafka_records(
        df,
        routing=ROUTING,
        queue_col="queue",
        kind_col="kind",
        args_cols=["user", "subject", "note", "tags", "opts"],
        priority_col="prio",
        run_at_col="run_at",
        meta_cols=["region", "tier"],
        excl_col="account",
        enqueued_at=AT,
        **kw,  # type: ignore[arg-type]
    )
    return [r.asDict(recursive=True) for r in out.collect()]


def test_golden_the_spark_envelope_means_what_the_gateway_builds(spark: SparkSession) -> None:
    (rec,) = spark_records(golden_row(spark))
    env = decode(str(rec["value"]).encode())  # strict: unknown fields and null optionals are refused
    assert env.id.startswith(ID_PREFIX)
    args = {"user": 42, "subject": 'Hé "there"\n\t\\ ✓', "note": None, "tags": ["a", "b"], "opts": {"x": 1}}

    # the same job through the gateway's own path (HTTP body -> parse_jobs -> build_records)
    body = {"id": env.id, "kind": "email.send", "args": args, "priority": 7, "run_at": AT + 60_000}
    body |= {"meta": {"region": "eu"}, "excl": "acct-9"}
    parsed = parse_jobs(
        "mail.eu", orjson.dumps(body), "application/json", max_batch=10, idempotency=None, now=AT
    )
    (gate,), acks = build_records(parsed, ROUTING, "mail.eu")
    assert env == decode(gate.value), "equal in meaning (raw bytes are not part of equality)"
    assert env == new_envelope(
        "mail.eu",
        "email.send",
        args,
        id=env.id,
        priority=7,
        run_at=AT + 60_000,
        meta={"region": "eu"},
        excl="acct-9",
        at_ms=AT,
    )
    assert (rec["topic"], str(rec["key"]).encode()) == (gate.topic, gate.key) == ("jobs.mail", b"acct-9")
    assert [(h["key"], bytes(h["value"])) for h in rec["headers"]] == list(gate.headers or [])
    assert acks == "all"


def test_absent_optionals_are_left_out_and_priority_defaults_to_enqueued_at(spark: SparkSession) -> None:
    df = spark.createDataFrame([(1, None, None)], "n long, prio long, region string")
    (row,) = to_kafka_records(
        df,
        routing=ROUTING,
        queue="plain",
        kind="k",
        args_cols=["n"],
        priority_col="prio",
        meta_cols=["region"],
        enqueued_at=AT,
    ).collect()
    doc = orjson.loads(row.value)
    assert set(doc) == {"v", "id", "queue", "kind", "args", "priority", "enqueued_at"}
    assert (doc["priority"], doc["args"], row.topic, row.key) == (AT, {"n": 1}, "jobs.default", doc["id"])
    env: Envelope = decode(row.value)
    assert env == new_envelope("plain", "k", {"n": 1}, id=env.id, at_ms=AT)


def test_ids_are_the_hash_of_the_job_content_and_stable_across_runs(spark: SparkSession) -> None:
    df = spark.createDataFrame([(1,), (2,), (1,)], "n long")

    def ids(at: int) -> list[str]:
        out = to_kafka_records(df, routing=ROUTING, queue="q", kind="k", args_cols=["n"], enqueued_at=at)
        return [r.key for r in out.collect()]

    first, later = ids(AT), ids(AT + 5_000)
    assert first == later, "enqueued_at (and the default priority) are not part of the identity"
    assert first[0] == first[2] != first[1], "identical rows are one job; different args, different ids"
    canonical = orjson.dumps({"queue": "q", "kind": "k", "args": '{"n":1}'})  # Spark's to_json, compact
    assert first[0] == ID_PREFIX + hashlib.sha256(canonical).hexdigest(), "the documented id formula"

    given = spark.createDataFrame([("job-1", 1)], "id string, n long")
    (row,) = to_kafka_records(
        given, routing=ROUTING, queue="q", kind="k", args_cols=["n"], id_col="id"
    ).collect()
    assert (row.key, decode(row.value).id) == ("job-1", "job-1")


def test_queue_column_routes_each_queue_like_routing_route(spark: SparkSession) -> None:
    queues = ["mail.a", "mailer", "img.x", "other", "canary.jobs.img"]
    df = spark.createDataFrame([(q, i) for i, q in enumerate(queues * 3)], "queue string, n long")
    for declared in (queues, None):  # declared, or computed with distinct() for a batch DataFrame
        out = to_kafka_records(
            df, routing=ROUTING, queue_col="queue", queues=declared, kind="k", args_cols=["n"]
        ).collect()
        assert len(out) == 15
        for row in out:
            env = decode(row.value)
            assert row.topic == ROUTING.route(env.queue)[0]
            assert dict((h.key, bytes(h.value)) for h in row.headers)["jobq-queue"] == env.queue.encode()


def test_args_as_struct_or_json_text(spark: SparkSession) -> None:
    df = spark.createDataFrame([(1, '{"deep":[1,{"x":null}]}'), (2, None)], "n long, raw string").withColumn(
        "s", sf.struct(sf.col("n").alias("n"), sf.lit(None).cast("string").alias("gone"))
    )
    by_struct = to_kafka_records(df, routing=ROUTING, queue="q", kind="k", args_struct="s").collect()
    assert [decode(r.value).args for r in by_struct] == [{"n": 1, "gone": None}, {"n": 2, "gone": None}]
    by_text = to_kafka_records(df, routing=ROUTING, queue="q", kind="k", args_json_col="raw").collect()
    assert [decode(r.value).args for r in by_text] == [{"deep": [1, {"x": None}]}, None]
    no_args = to_kafka_records(df, routing=ROUTING, queue="q", kind="k").collect()
    assert {decode(r.value).args for r in no_args} == {None}


@pytest.mark.parametrize(
    ("column", "value", "field"),
    [
        ("kind", "has space", "kind"),
        ("kind", None, "kind"),
        ("account", "a{b}", "excl"),
        ("region", "x" * 300, "meta.region"),
        ("region", "{curly}", "meta.region"),
        ("raw", "{not json", "args"),
        ("queue", "mail.undeclared", "queue"),
    ],
)
def test_a_row_the_relay_would_dead_letter_fails_the_write(
    spark: SparkSession, column: str, value: str | None, field: str
) -> None:
    base = {"queue": "mail.a", "kind": "k", "account": "acct", "region": "eu", "raw": "{}"}
    row = {**base, column: value}
    df = spark.createDataFrame([tuple(row.values())], ", ".join(f"{k} string" for k in row))
    out = to_kafka_records(
        df,
        routing=ROUTING,
        queue_col="queue",
        queues=["mail.a"],
        kind_col="kind",
        args_json_col="raw",
        excl_col="account",
        meta_cols=["region"],
    )
    with pytest.raises(SparkRuntimeException, match=f"jqspark: envelope field {field}"):
        out.collect()


def test_without_validation_a_bad_row_is_written_for_the_relay_to_dead_letter(spark: SparkSession) -> None:
    df = spark.createDataFrame([("bad kind",)], "kind string")
    (row,) = to_kafka_records(df, routing=ROUTING, queue="q", kind_col="kind", validate=False).collect()
    with pytest.raises(EnvelopeError, match="kind"):
        decode(row.value)


def test_names_known_in_python_are_checked_before_spark_runs(spark: SparkSession) -> None:
    df = spark.createDataFrame([(1,)], "n long")
    with pytest.raises(EnvelopeError):
        to_kafka_records(df, routing=ROUTING, queue="Bad Queue", kind="k")
    with pytest.raises(EnvelopeError):
        to_kafka_records(df, routing=ROUTING, queue="q", kind="bad kind")
    with pytest.raises(QueueUnrouted):
        to_kafka_records(df, routing=RoutingSettings(default_topic=""), queue="q", kind="k")
    with pytest.raises(ValueError, match="exactly one of"):
        to_kafka_records(df, routing=ROUTING, queue="q", kind="k", args_cols=["n"], args_json_col="n")
    with pytest.raises(ValueError, match="meta key"):
        to_kafka_records(df, routing=ROUTING, queue="q", kind="k", meta_cols={"Bad": "n"})
    stream = spark.readStream.format("rate").load()
    with pytest.raises(ValueError, match="queues="):
        to_kafka_records(stream, routing=ROUTING, queue_col="value", kind="k")


def test_connector_jars_leave_out_what_pyspark_bundles(tmp_path: Path) -> None:
    jars = [Path(p).name for p in connector_jars(ensure_spark_jars())]
    assert any(j.startswith("spark-sql-kafka-0-10_2.13-4.2.0") for j in jars)
    assert any(j.startswith("kafka-clients-") for j in jars)
    assert not any(j.startswith(("scala-library-", "slf4j-api-", "hadoop-client-")) for j in jars)
    with pytest.raises(SparkSetupError, match="ensure_spark_jars"):
        connector_jars(tmp_path)


def test_the_patterns_checked_in_spark_are_the_decoders() -> None:
    from jqcore import envelope_rules
    from jqspark import records

    decoder_id = "^" + envelope_rules._ID_RE.pattern + r"\z"
    assert decoder_id == records._ID_JAVA
    assert envelope_rules._META_KEY_RE.pattern == records._META_KEY.pattern
