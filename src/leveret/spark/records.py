"""Log-system records (see :mod:`leveret.logs.record`) as typed columns, in Spark.

Two ways to the same rows, parsed by the same code (:mod:`leveret.spark.logparse`, Arrow
and pyarrow's JSON reader, on the executors):

- ``spark.readStream.format("amqp").option("records", "log")``: the source parses as it
  reads (what ``leveret pipeline ingest`` does: Spark receives typed batches);
- ``parse_log_records(df)`` on rows of ``format("amqp")`` (messages), e.g. read earlier.

=========  ==========  ====================================================================
column     type        from
=========  ==========  ====================================================================
ts         timestamp   the record's ``ts`` (ISO 8601); else the message's timestamp
                       property; else the time it was parsed
date       date        ``ts`` in UTC (the lake is partitioned by it)
severity   string      the record's, normalised (``WARN`` -> ``warning``); else, and for
                       plain text, from the routing key (``error`` or ``kern.error``); for
                       plain text, else from a ``severity: message`` prefix; else ``info``
facility   string      the record's; else from a ``facility.severity`` key; else ``user``;
                       ``broker`` for the broker's own log (exchange ``amq.rabbitmq.log``)
                       and its events (``amq.rabbitmq.event``: the event and who did it
                       as message, its headers as JSON in ``extra``)
host, app  string      for the broker's log and events, host is the ``node`` header
pid        bigint
message    string
logger     string      optional
exc        string      optional (a formatted traceback)
extra      string      optional: the record's ``extra`` value as JSON text
_corrupt   string      NULL for a good record; else the body (``base64:`` + its base64 when
                       it is not UTF-8) and every other record column is NULL
=========  ==========  ====================================================================

plus the message columns named in ``keep`` (by default offset, routing_key, redelivered,
message_id). What makes a body a record, plain text, or malformed is told in
:mod:`leveret.spark.logparse`; malformed bodies are never dropped.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING

from leveret.logs.record import SEVERITIES
from leveret.spark.schema import DEFAULT_KEEP, RECORD_COLUMNS, log_schema

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame

#: What the parser needs of a message besides the columns kept.
_NEEDED = ("exchange", "routing_key", "content_type", "timestamp", "headers", "body")


def parse_log_records(df: DataFrame, keep: Sequence[str] = DEFAULT_KEEP) -> DataFrame:
    """Rows of ``format("amqp")`` -> typed log-record columns (see the module docstring)."""
    from pyspark.sql.pandas.types import to_arrow_schema

    from leveret.spark.logparse import records_from_messages

    keep = tuple(keep)
    schema = log_schema(keep, df.schema)
    arrow_schema = to_arrow_schema(schema, timezone="UTC")
    wanted = list(dict.fromkeys([*keep, *_NEEDED]))

    def parse(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        return records_from_messages(batches, keep, arrow_schema)

    return df.select(*wanted).mapInArrow(parse, schema)


__all__ = ["RECORD_COLUMNS", "SEVERITIES", "parse_log_records"]
