"""Rows → Kafka records holding envelope v1 jobs, built only with Spark SQL functions (no Python UDF).

:func:`to_kafka_records` maps a DataFrame (batch or streaming) onto the four columns Spark's Kafka sink
writes: ``topic`` (from :class:`~jqcore.routing.RoutingSettings`), ``key`` (the exclusivity value when
set, else the job id: the gateway's rule), ``value`` (the envelope JSON) and ``headers`` (``jobq-queue``,
``jobq-kind``, as the gateway sets them). Everything runs inside the JVM, so the rows never cross into
Python.

Ids. Without ``id_col`` a job's id is ``sp-`` + the SHA-256 of the canonical JSON of every envelope field
the row supplies (queue, kind, args, and priority, run_at, meta, excl when given; never ``enqueued_at``).
A row written twice - a streaming batch replayed after a crash, a backfill run again - therefore yields the
same id twice, and the engine keeps the first and counts the second as a duplicate. The flip side: two
rows with identical content are one job; give ``id_col`` (or a distinguishing column in ``args``) when
they must be two.

Validation. Envelope v1 refuses unknown fields and ``null`` optionals, so absent optionals are left out of
the JSON (``to_json`` with ``ignoreNullFields``) while ``args`` is written with its nulls kept. With
``validate=True`` (the default) a row whose id, queue, kind, excl, meta, run_at or size would make the
relay dead-letter it fails the Spark job instead (``raise_error``), naming the field: a pipeline bug shows
up where it is, not as dead letters later.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as sf
from pyspark.sql.types import DateType, NumericType, TimestampNTZType, TimestampType

from jqcore.admission import RESERVED_PREFIX, reserved_problem
from jqcore.envelope import MAX_ENVELOPE_BYTES, validate_name
from jqcore.envelope_rules import MAX_META_ENTRIES, MAX_TS_MS, VERSION
from jqcore.routing import RoutingSettings

__all__ = ["HEADER_KIND", "HEADER_QUEUE", "ID_PREFIX", "RECORD_COLUMNS", "to_kafka_records"]

ID_PREFIX = "sp-"
RECORD_COLUMNS = ("topic", "key", "value", "headers")
HEADER_QUEUE, HEADER_KIND = "jobq-queue", "jobq-kind"

# The decoder's id pattern (jqcore.envelope_rules._ID_RE) as a Java regex: rlike() searches, hence
# the anchors.
_ID_JAVA = r"^[A-Za-z0-9][A-Za-z0-9._:@-]{0,127}\z"
_META_KEY = re.compile(r"[a-z][a-z0-9_]{0,31}")
_MAX_META_VALUE = 256
_KEEP_NULLS = {"ignoreNullFields": "false"}
_DROP_NULLS = {"ignoreNullFields": "true"}

ColumnLike = str | Column


def _c(value: ColumnLike) -> Column:
    return sf.col(value) if isinstance(value, str) else value


def _exactly_one(what: str, **given: object) -> str:
    chosen = [name for name, value in given.items() if value is not None]
    if len(chosen) != 1:
        raise ValueError(f"give exactly one of {', '.join(given)} for the {what} (got {chosen or 'none'})")
    return chosen[0]


def _problem(cond: Column, field: str, text: str, shown: Column | None = None) -> Column:
    """A message naming ``field`` when ``cond`` holds for the row, else null."""
    parts = [sf.lit(f"envelope field {field}: {text}")]
    if shown is not None:
        got = sf.coalesce(sf.substring(shown, 1, 80), sf.lit("null"))
        parts.append(sf.concat(sf.lit(" (got "), got, sf.lit(")")))
    return sf.when(cond, sf.concat(*parts))


def _bad_name(col: Column, pattern: str) -> Column:
    return ~sf.coalesce(col.rlike(pattern), sf.lit(False))


# --- the pieces of an envelope -------------------------------------------------------------------------


def _queues(
    df: DataFrame, queue: str | None, queue_col: str | None, queues: Sequence[str] | None
) -> tuple[Column, list[str]]:
    """The queue column and the queue names it may hold (validated, routed below)."""
    _exactly_one("queue", queue=queue, queue_col=queue_col)
    if queue is not None:
        return sf.lit(validate_name("queue", queue)), [queue]
    assert queue_col is not None
    if queues is None:
        if df.isStreaming:
            raise ValueError("a streaming DataFrame with queue_col needs queues=[...] (its possible values)")
        queues = sorted({r[0] for r in df.select(queue_col).distinct().collect() if r[0] is not None})
    names = [validate_name("queue", q) for q in dict.fromkeys(queues)]
    if not names:
        raise ValueError("queues is empty: no queue to route")
    return sf.col(queue_col).cast("string"), names


def _topic(queue: Column, names: list[str], routing: RoutingSettings) -> Column:
    """The routed topic: one literal, or a ``when`` chain over the declared queues (route() decides, in
    Python, once per queue, so the rule is the gateway's to the letter; unrouted queues fail here)."""
    by_topic: dict[str, list[str]] = {}
    for name in names:
        by_topic.setdefault(routing.route(name)[0], []).append(name)
    if len(by_topic) == 1:
        return sf.lit(next(iter(by_topic)))
    chain: Column | None = None
    for topic, members in by_topic.items():
        cond = queue.isin(*members)
        chain = sf.when(cond, sf.lit(topic)) if chain is None else chain.when(cond, sf.lit(topic))
    assert chain is not None
    return chain  # undeclared queues: null topic, and the row fails validation first


def _args_json(
    args_cols: Sequence[ColumnLike] | None, args_struct: ColumnLike | None, args_json_col: str | None
) -> tuple[Column, Column | None]:
    """(the args JSON text, a 'not JSON' condition for pre-encoded args). Nulls inside args are kept."""
    if args_cols is None and args_struct is None and args_json_col is None:
        return sf.lit("null"), None
    chosen = _exactly_one("args", args_cols=args_cols, args_struct=args_struct, args_json_col=args_json_col)
    if chosen == "args_cols":
        assert args_cols is not None
        if not args_cols:
            raise ValueError("args_cols is empty")
        return sf.to_json(sf.struct(*[_c(c) for c in args_cols]), _KEEP_NULLS), None
    if chosen == "args_struct":
        assert args_struct is not None
        return sf.coalesce(sf.to_json(_c(args_struct), _KEEP_NULLS), sf.lit("null")), None
    raw = sf.col(str(args_json_col)).cast("string")
    return sf.coalesce(raw, sf.lit("null")), raw.isNotNull() & sf.try_parse_json(raw).isNull()


def _millis(df: DataFrame, name: str) -> Column:
    """A timestamp/date column as epoch ms, a numeric one as it is (already ms)."""
    dtype = df.schema[name].dataType
    col = sf.col(name)
    if isinstance(dtype, TimestampType | TimestampNTZType | DateType):
        return sf.unix_millis(col.cast("timestamp"))
    if isinstance(dtype, NumericType):
        return col.cast("long")
    raise TypeError(f"{name} must be a timestamp, a date or epoch milliseconds, not {dtype.simpleString()}")


def _meta(meta_cols: Sequence[str] | Mapping[str, ColumnLike] | None) -> tuple[Column | None, list[Column]]:
    """(the meta struct, null when the row has no meta value; its problems). Empty strings count as
    absent: the envelope refuses empty meta values."""
    if not meta_cols:
        return None, []
    pairs = list(meta_cols.items()) if isinstance(meta_cols, Mapping) else [(c, c) for c in meta_cols]
    if len(pairs) > MAX_META_ENTRIES:
        raise ValueError(f"at most {MAX_META_ENTRIES} meta entries, got {len(pairs)}")
    values: list[tuple[str, Column]] = []
    for key, source in pairs:
        if _META_KEY.fullmatch(key) is None:
            raise ValueError(f"meta key {key!r} must match [a-z][a-z0-9_]{{0,31}}")
        values.append((key, sf.nullif(_c(source).cast("string"), sf.lit(""))))
    problems = [
        _problem(
            (sf.length(v) > _MAX_META_VALUE) | v.contains("{") | v.contains("}"),
            f"meta.{k}",
            f"must be 1-{_MAX_META_VALUE} characters without braces",
            v,
        )
        for k, v in values
    ]
    struct = sf.struct(*[v.alias(k) for k, v in values])
    return sf.when(sf.coalesce(*[v for _, v in values]).isNull(), sf.lit(None)).otherwise(struct), problems


# --- the public function -------------------------------------------------------------------------------


def to_kafka_records(
    df: DataFrame,
    *,
    routing: RoutingSettings,
    queue: str | None = None,
    queue_col: str | None = None,
    queues: Sequence[str] | None = None,
    kind: str | None = None,
    kind_col: str | None = None,
    args_cols: Sequence[ColumnLike] | None = None,
    args_struct: ColumnLike | None = None,
    args_json_col: str | None = None,
    id_col: str | None = None,
    id_prefix: str = ID_PREFIX,
    priority_col: str | None = None,
    run_at_col: str | None = None,
    meta_cols: Sequence[str] | Mapping[str, ColumnLike] | None = None,
    excl_col: str | None = None,
    enqueued_at: int | Column | None = None,
    validate: bool = True,
) -> DataFrame:
    """Map each row of ``df`` onto one job: a DataFrame of ``topic``, ``key``, ``value``, ``headers``.

    - queue: ``queue="name"`` for every row, or ``queue_col`` with ``queues=[...]`` listing the values it
      may hold (each routed once with ``routing.route``; a batch DataFrame without ``queues`` has them
      computed with a ``distinct()`` job). A row holding an undeclared queue fails the write.
    - kind: ``kind="name"`` or ``kind_col``.
    - args (any JSON value): ``args_cols`` (those columns as one JSON object, keyed by column name),
      ``args_struct`` (a struct, map or array column), or ``args_json_col`` (a string column already holding
      JSON, written verbatim); none of them means ``"args": null``.
    - ``id_col``: the job id; without it, ``id_prefix`` + SHA-256 of the row's canonical job JSON.
    - ``priority_col`` (lower runs first; a null, or no column, means ``enqueued_at``: FIFO),
      ``run_at_col`` (timestamp, date, or epoch ms), ``meta_cols`` (column names, or meta key → column;
      values as strings, null or empty left out), ``excl_col`` (exclusivity value, also the record key).
    - ``enqueued_at``: epoch ms (int or column); default ``current_timestamp()`` in ms, fixed per batch.
    - ``validate``: fail the Spark job on a row the relay would dead-letter (see the module docstring);
      ``False`` skips those per-row checks (names given in Python are checked either way).
    """
    queue_c, names = _queues(df, queue, queue_col, queues)
    _exactly_one("kind", kind=kind, kind_col=kind_col)
    if kind is not None and reserved_problem(kind):
        raise ValueError(f"kind {kind!r}: {reserved_problem(kind)}")
    kind_c = sf.lit(validate_name("kind", kind)) if kind is not None else sf.col(str(kind_col)).cast("string")
    validate_name("id", f"{id_prefix}0")
    args, args_invalid = _args_json(args_cols, args_struct, args_json_col)
    if enqueued_at is None:
        enqueued = sf.unix_millis(sf.current_timestamp())
    else:
        enqueued = (sf.lit(enqueued_at) if isinstance(enqueued_at, int) else enqueued_at).cast("long")
    priority = sf.col(priority_col).cast("long") if priority_col else None
    run_at = _millis(df, run_at_col) if run_at_col else None
    meta, meta_problems = _meta(meta_cols)
    excl = sf.col(excl_col).cast("string") if excl_col else None

    supplied = {"priority": priority, "run_at": run_at, "meta": meta, "excl": excl}
    identity = [queue_c.alias("queue"), kind_c.alias("kind"), args.alias("args")]
    identity += [c.alias(name) for name, c in supplied.items() if c is not None]
    if id_col:
        job_id = sf.col(id_col).cast("string")
    else:
        job_id = sf.concat(sf.lit(id_prefix), sf.sha2(sf.to_json(sf.struct(*identity), _DROP_NULLS), 256))

    fields = [
        sf.lit(VERSION).alias("v"),
        job_id.alias("id"),
        queue_c.alias("queue"),
        kind_c.alias("kind"),
        (enqueued if priority is None else sf.coalesce(priority, enqueued)).alias("priority"),
        enqueued.alias("enqueued_at"),
        *[c.alias(name) for name, c in supplied.items() if c is not None and name != "priority"],
    ]
    head = sf.to_json(sf.struct(*fields), _DROP_NULLS)  # {"v":1,...}: args appended before the brace
    value = sf.concat(sf.substr(head, sf.lit(1), sf.length(head) - 1), sf.lit(',"args":'), args, sf.lit("}"))
    if validate:
        checks = [
            _problem(_bad_name(job_id, _ID_JAVA), "id", "must be 1-128 of [A-Za-z0-9._:@-]", job_id),
            _problem(~sf.coalesce(queue_c.isin(*names), sf.lit(False)), "queue", f"not in {names}", queue_c),
            _problem(_bad_name(kind_c, _ID_JAVA), "kind", "must be 1-128 of [A-Za-z0-9._:@-]", kind_c),
            _problem(
                kind_c.startswith(RESERVED_PREFIX), "kind", f"{RESERVED_PREFIX}* kinds are jobq's own", kind_c
            ),
            *meta_problems,
        ]
        if excl is not None:
            checks.append(_problem(excl.isNotNull() & _bad_name(excl, _ID_JAVA), "excl", "not id-like", excl))
        if run_at is not None:
            bad_time = (run_at < 0) | (run_at > MAX_TS_MS)
            checks.append(_problem(bad_time, "run_at", f"must be 0-{MAX_TS_MS} ms", run_at.cast("string")))
        if args_invalid is not None:
            checks.append(_problem(args_invalid, "args", "args_json_col must hold JSON text"))
        size = sf.octet_length(value) > MAX_ENVELOPE_BYTES
        checks.append(_problem(size, "$", f"envelope larger than {MAX_ENVELOPE_BYTES} bytes"))
        problem = sf.coalesce(*checks)
        refused = sf.raise_error(sf.concat(sf.lit("jqspark: "), problem))
        value = sf.when(problem.isNull(), value).otherwise(refused)

    headers = sf.array(
        sf.struct(sf.lit(HEADER_QUEUE).alias("key"), queue_c.cast("binary").alias("value")),
        sf.struct(sf.lit(HEADER_KIND).alias("key"), kind_c.cast("binary").alias("value")),
    )
    key = job_id if excl is None else sf.coalesce(excl, job_id)
    return df.select(
        _topic(queue_c, names, routing).alias("topic"),
        key.alias("key"),
        value.alias("value"),
        headers.alias("headers"),
    )
