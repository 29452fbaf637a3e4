"""Log-system records (see :mod:`leveret.logs.record`) as typed columns, in Spark SQL.

``parse_log_records(df)`` takes rows of ``format("amqp")`` and returns one row per message:

=========  ==========  ====================================================================
column     type        from
=========  ==========  ====================================================================
ts         timestamp   the record's ``ts`` (RFC 3339); else the message's timestamp
                       property; else the time it was parsed
date       date        ``ts`` in UTC (the lake is partitioned by it)
severity   string      the record's, normalised (``WARN`` -> ``warning``); for plain text,
                       from the routing key (``error`` or ``kern.error``), else from a
                       ``severity: message`` prefix of the text, else ``info``
facility   string      the record's; for plain text, from a ``facility.severity`` key
host, app  string
pid        bigint
message    string
logger     string      optional
exc        string      optional (a formatted traceback)
extra      string      optional: the record's ``extra`` object as JSON text
_corrupt   string      NULL for a good record; else the body (``base64:`` + its base64 when
                       it is not UTF-8) and every other record column is NULL
=========  ==========  ====================================================================

plus the message columns named in ``keep`` (offset, routing_key, redelivered, message_id).

A body is a record when it is a JSON object (content type ``application/json`` or a body
starting with ``{``) with a string ``message``, a ``ts`` that parses if present, a known
severity if present and fields of the right types. Any other JSON, or a body that is not
UTF-8, is malformed and goes to ``_corrupt``: never dropped. A UTF-8 body that is not JSON is
plain text from another producer (the tutorial's ``emit_log.py``) and becomes a record whose
message is the text, as ``leveret receive-logs`` shows it.
"""

from __future__ import annotations

from collections.abc import Sequence

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import LongType, StringType, StructField, StructType

SEVERITIES = ("debug", "info", "warning", "error", "critical")
_ALIASES = {"warn": "warning", "err": "error", "crit": "critical", "fatal": "critical"}
DEFAULT_FACILITY = "user"

#: The JSON document of a record, as Spark reads it (``extra`` kept as raw JSON text).
RECORD_JSON_SCHEMA = StructType(
    [
        StructField("ts", StringType()),
        StructField("severity", StringType()),
        StructField("facility", StringType()),
        StructField("host", StringType()),
        StructField("app", StringType()),
        StructField("pid", LongType()),
        StructField("message", StringType()),
        StructField("logger", StringType()),
        StructField("exc", StringType()),
        StructField("extra", StringType()),
        StructField("_json_corrupt", StringType()),
    ]
)

RECORD_COLUMNS = (
    "ts",
    "date",
    "severity",
    "facility",
    "host",
    "app",
    "pid",
    "message",
    "logger",
    "exc",
    "extra",
    "_corrupt",
)

DEFAULT_KEEP = ("offset", "routing_key", "redelivered", "message_id")

#: A plain text's ``severity: message`` prefix (Java regex; group 1 is the word).
PREFIX_PATTERN = r"^\s*(?i:(debug|info|warning|warn|error|err|critical|crit|fatal))\s*:"


def _severity(word: Column) -> Column:
    """A severity word normalised: lower case, aliases resolved; NULL if unknown."""
    low = F.lower(F.trim(word))
    expr = F.when(low.isin(*SEVERITIES), low)
    for alias, name in _ALIASES.items():
        expr = expr.when(low == alias, F.lit(name))
    return expr


def parse_log_records(df: DataFrame, keep: Sequence[str] = DEFAULT_KEEP) -> DataFrame:
    """Rows of ``format("amqp")`` -> typed log-record columns (see the module docstring)."""
    valid = F.expr("is_valid_utf8(body)")
    text = F.when(valid, F.expr("decode(body, 'UTF-8')"))
    is_json = (F.col("content_type") == "application/json") | F.ltrim(text).startswith("{")
    doc = F.from_json(
        text,
        RECORD_JSON_SCHEMA,
        {"mode": "PERMISSIVE", "columnNameOfCorruptRecord": "_json_corrupt"},
    )
    key = F.coalesce(F.col("routing_key"), F.lit(""))
    prefix = F.regexp_extract(text, PREFIX_PATTERN, 1)
    key_severity = F.coalesce(
        _severity(F.substring_index(key, ".", -1)), _severity(prefix), F.lit("info")
    )
    key_facility = F.when(
        F.instr(key, ".") > 0,
        F.expr(
            "substring(routing_key, 1, length(routing_key) - "
            "length(substring_index(routing_key, '.', -1)) - 1)"
        ),
    )
    key_facility = F.coalesce(F.nullif(key_facility, F.lit("")), F.lit(DEFAULT_FACILITY))
    fallback_ts = F.coalesce(F.col("timestamp"), F.current_timestamp())

    staged = df.select(
        *[F.col(c) for c in keep],
        valid.alias("_valid"),
        text.alias("_text"),
        is_json.alias("_is_json"),
        F.when(is_json, doc).alias("_doc"),
        key_severity.alias("_key_severity"),
        key_facility.alias("_key_facility"),
        fallback_ts.alias("_fallback_ts"),
        F.col("body").alias("_body"),
    )
    d = F.col("_doc")
    json_ts = F.try_to_timestamp(d["ts"])
    json_severity = _severity(d["severity"])
    json_bad = (
        d.isNull()
        | d["_json_corrupt"].isNotNull()
        | d["message"].isNull()
        | (d["ts"].isNotNull() & json_ts.isNull())
        | (d["severity"].isNotNull() & json_severity.isNull())
    )
    corrupt = F.when(~F.col("_valid"), F.concat(F.lit("base64:"), F.base64("_body"))).when(
        F.col("_is_json") & json_bad, F.col("_text")
    )
    good_json = F.col("_is_json")

    def pick(json_value: Column, text_value: Column) -> Column:
        return F.when(
            F.col("_corrupt").isNull(), F.when(good_json, json_value).otherwise(text_value)
        )

    with_corrupt = staged.withColumn("_corrupt", corrupt)
    ts = F.when(
        F.col("_corrupt").isNull(), F.coalesce(F.when(good_json, json_ts), F.col("_fallback_ts"))
    ).otherwise(F.col("_fallback_ts"))
    out = with_corrupt.select(
        *[F.col(c) for c in keep],
        ts.alias("ts"),
        pick(F.coalesce(json_severity, F.col("_key_severity")), F.col("_key_severity")).alias(
            "severity"
        ),
        pick(F.coalesce(d["facility"], F.col("_key_facility")), F.col("_key_facility")).alias(
            "facility"
        ),
        pick(F.coalesce(d["host"], F.lit("")), F.lit("")).alias("host"),
        pick(F.coalesce(d["app"], F.lit("")), F.lit("")).alias("app"),
        pick(F.coalesce(d["pid"], F.lit(0).cast("bigint")), F.lit(0).cast("bigint")).alias("pid"),
        pick(d["message"], F.col("_text")).alias("message"),
        pick(d["logger"], F.lit(None).cast("string")).alias("logger"),
        pick(d["exc"], F.lit(None).cast("string")).alias("exc"),
        pick(d["extra"], F.lit(None).cast("string")).alias("extra"),
        F.col("_corrupt"),
    )
    # dates in UTC whatever the session's time zone
    utc = F.convert_timezone(None, F.lit("UTC"), F.col("ts").cast("timestamp_ntz"))
    out = out.withColumn("date", F.to_date(utc))
    return out.select(*keep, *RECORD_COLUMNS)
