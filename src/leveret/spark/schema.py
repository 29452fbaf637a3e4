"""The rows of ``format("amqp")``: one per message, in Spark and in Arrow terms.

Readers build Arrow record batches straight from deliveries (no per-row conversion in
Spark's Python worker); the Arrow schema is derived from the Spark one exactly as Spark's
worker derives it, so the two can never disagree.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pyarrow as pa
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import (
    BinaryType,
    BooleanType,
    DateType,
    IntegerType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from leveret.logs.amqp import PROPERTY_NAMES
from leveret.logs.reading import header_text

#: The message properties carried as columns of their own, in the order of the schema.
#: The headers are a map column of their own; cluster_id is not kept.
PROPERTY_COLUMNS: tuple[str, ...] = tuple(
    n for n in PROPERTY_NAMES if n not in ("headers", "cluster_id")
)
_INT_PROPERTIES = frozenset({"delivery_mode", "priority"})

#: One row per message. ``offset`` is the stream offset (stream queues) or the source's own
#: sequence number (classic queues); ``headers`` values are rendered as strings.
MESSAGE_SCHEMA = StructType(
    [
        StructField("offset", LongType(), False),
        StructField("exchange", StringType(), True),
        StructField("routing_key", StringType(), True),
        StructField("redelivered", BooleanType(), True),
        *(
            StructField(
                name,
                IntegerType()
                if name in _INT_PROPERTIES
                else TimestampType()
                if name == "timestamp"
                else StringType(),
                True,
            )
            for name in PROPERTY_COLUMNS
        ),
        StructField("headers", MapType(StringType(), StringType(), True), True),
        StructField("body", BinaryType(), True),
    ]
)

ARROW_SCHEMA: pa.Schema = to_arrow_schema(MESSAGE_SCHEMA, timezone="UTC")

COLUMNS: tuple[str, ...] = tuple(MESSAGE_SCHEMA.fieldNames())


class BatchBuilder:
    """Collects messages column by column and turns them into Arrow record batches."""

    __slots__ = ("_cols",)

    def __init__(self) -> None:
        self._cols: list[list[Any]] = [[] for _ in COLUMNS]

    def __len__(self) -> int:
        return len(self._cols[0])

    def add(
        self,
        offset: int,
        exchange: str | None,
        routing_key: str | None,
        redelivered: bool,
        props: Any,
        body: bytes,
    ) -> None:
        """One delivery; ``props`` is a ``pika.BasicProperties`` (or anything with the same
        attributes)."""
        cols = self._cols
        cols[0].append(offset)
        cols[1].append(exchange)
        cols[2].append(routing_key)
        cols[3].append(redelivered)
        i = 4
        for name in PROPERTY_COLUMNS:
            value = getattr(props, name, None)
            if name == "timestamp" and value is not None:
                # AMQP timestamps are whole seconds since the epoch; Arrow wants µs
                value = int(value) * 1_000_000
            cols[i].append(value)
            i += 1
        headers = getattr(props, "headers", None)
        cols[i].append(_headers(headers) if headers else None)
        cols[i + 1].append(bytes(body))

    def add_row(self, row: Sequence[Any]) -> None:
        """One row already in column order (used when replaying a write-ahead log)."""
        for col, value in zip(self._cols, row, strict=True):
            col.append(value)

    def build(self) -> pa.RecordBatch:
        """The collected rows as one batch; the builder is empty afterwards."""
        arrays = [
            pa.array(col, type=field.type)
            for col, field in zip(self._cols, ARROW_SCHEMA, strict=True)
        ]
        self._cols = [[] for _ in COLUMNS]
        return pa.RecordBatch.from_arrays(arrays, schema=ARROW_SCHEMA)


def _headers(headers: Mapping[str, Any]) -> list[tuple[str, str | None]]:
    return [(str(k), header_text(v)) for k, v in headers.items()]


# ----------------------------------------------------------------------- log records
#: The columns of a log record in the lake (see :mod:`leveret.spark.records`), all nullable,
#: strings but for those in ``_RECORD_TYPES``.
RECORD_COLUMNS: tuple[str, ...] = (
    "ts", "date", "severity", "facility", "host", "app", "pid", "message", "logger", "exc",
    "extra", "_corrupt",
)  # fmt: skip
_RECORD_TYPES = {"ts": TimestampType(), "date": DateType(), "pid": LongType()}
RECORD_FIELDS: tuple[StructField, ...] = tuple(
    StructField(name, _RECORD_TYPES.get(name, StringType()), True) for name in RECORD_COLUMNS
)

#: The message columns the lake keeps beside each record.
DEFAULT_KEEP: tuple[str, ...] = ("offset", "routing_key", "redelivered", "message_id")


def log_schema(
    keep: Sequence[str] = DEFAULT_KEEP, source: StructType = MESSAGE_SCHEMA
) -> StructType:
    """Rows of parsed log records: the ``keep`` columns of ``source``, then the record's."""
    kept = [source[name] for name in keep]
    clash = [name for name in keep if name in RECORD_COLUMNS]
    if clash:
        raise ValueError(f"cannot keep {clash[0]!r}: a log record has a column of that name")
    return StructType([*kept, *RECORD_FIELDS])


LOG_SCHEMA = log_schema()
LOG_ARROW_SCHEMA: pa.Schema = to_arrow_schema(LOG_SCHEMA, timezone="UTC")
