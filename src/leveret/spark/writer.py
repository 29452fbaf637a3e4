"""Writing rows as messages, batch and streaming: each task publishes its partition with
publisher confirms on a connection of its own, and succeeds only once the broker has
confirmed every message.

Which column becomes what is set by options (see :class:`~leveret.spark.options.WriteOptions`):
``exchange``; ``routingKey`` (one key for all) or ``routingKeyColumn`` (default: a
``routing_key`` column); ``bodyColumn`` (default ``body``; strings are sent as UTF-8,
anything else that is not binary as its JSON); ``headersColumn`` (default ``headers``, a map);
``property.<name>`` for each message property (default: a column of that name, e.g.
``message_id``, ``content_type``, ``timestamp``); ``persistent``; ``mandatory`` (a
returned message fails the task); ``confirmWindow``.

A failed task is retried by Spark and publishes its whole partition again, and a streaming
batch replayed after a crash is published again: delivery is at-least-once. Give rows a
``message_id`` when consumers need to drop duplicates.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, date, datetime
from typing import Any

import pika
from pyspark.sql import Row
from pyspark.sql.datasource import DataSourceStreamWriter, DataSourceWriter, WriterCommitMessage

from leveret.logs.reading import header_text
from leveret.spark.client import Outgoing, publish
from leveret.spark.options import WriteOptions


class PublishedMessage(WriterCommitMessage):
    """What one task published."""

    def __init__(self, count: int) -> None:
        self.count = count


def _body(value: Any) -> bytes:
    if value is None:
        return b""
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value)
    if isinstance(value, str):
        return value.encode()
    if isinstance(value, Row):
        value = value.asDict(recursive=True)
    return json.dumps(value, default=str, separators=(",", ":")).encode()


def _property(name: str, value: Any) -> Any:
    if value is None:
        return None
    if name == "timestamp":
        if isinstance(value, datetime):
            if value.tzinfo is None:
                value = value.replace(tzinfo=UTC)
            return int(value.timestamp())
        if isinstance(value, date):
            return int(datetime(value.year, value.month, value.day, tzinfo=UTC).timestamp())
        return int(value)
    if name in ("delivery_mode", "priority"):
        return int(value)
    return str(value)


def _headers(value: Any) -> dict[str, Any] | None:
    if not value:
        return None
    if isinstance(value, Row):
        value = value.asDict()
    return {
        str(k): v if isinstance(v, int | float | bool) else header_text(v)
        for k, v in dict(value).items()
    }


def messages(opts: WriteOptions, rows: Iterator[Row]) -> Iterator[Outgoing]:
    """Rows as messages, by the column mapping of ``opts``."""
    for row in rows:
        key = opts.routing_key
        if opts.routing_key_column is not None:
            key = row[opts.routing_key_column]
        kwargs: dict[str, Any] = {}
        for prop, col in opts.property_columns:
            value = _property(prop, row[col])
            if value is not None:
                kwargs[prop] = value
        if opts.persistent and "delivery_mode" not in kwargs:
            kwargs["delivery_mode"] = 2
        if opts.headers_column is not None:
            headers = _headers(row[opts.headers_column])
            if headers:
                kwargs["headers"] = headers
        yield Outgoing(
            opts.exchange,
            "" if key is None else str(key),
            _body(row[opts.body_column]),
            pika.BasicProperties(**kwargs),
        )


def _write(opts: WriteOptions, rows: Iterator[Row]) -> PublishedMessage:
    count = publish(
        opts.url,
        messages(opts, rows),
        window=opts.confirm_window,
        mandatory=opts.mandatory,
    )
    return PublishedMessage(count)


class AmqpWriter(DataSourceWriter):
    """``df.write.format("amqp")``: every row published, confirmed, or the job fails."""

    def __init__(self, opts: WriteOptions) -> None:
        self.opts = opts

    def write(self, iterator: Iterator[Row]) -> WriterCommitMessage:
        return _write(self.opts, iterator)


class AmqpStreamWriter(DataSourceStreamWriter):
    """``df.writeStream.format("amqp")``: each micro-batch published with confirms."""

    def __init__(self, opts: WriteOptions) -> None:
        self.opts = opts

    def write(self, iterator: Iterator[Row]) -> WriterCommitMessage:
        return _write(self.opts, iterator)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Nothing to do: every task's messages were confirmed before it finished."""
