"""Reading an offset range of a stream on an executor: blocks of deliveries off the wire
(:mod:`leveret.spark.wire`), their fields as columns (:mod:`leveret.spark.frames`), and
either the message rows of ``format("amqp")`` or, parsed on the spot, log records
(:mod:`leveret.spark.logparse`): Spark gets typed Arrow batches either way.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np
import pika.exceptions
import pyarrow as pa

from leveret.logs.amqp import LogsError, parameters, redact
from leveret.logs.reading import TIMESTAMP_HEADER, header_text
from leveret.spark.client import AmqpSourceError, RangeProgress, error_from, urls_of
from leveret.spark.frames import NO_OFFSET, Fields, Mask
from leveret.spark.logparse import Bodies, Messages, header_times, log_batch
from leveret.spark.schema import ARROW_SCHEMA, PROPERTY_COLUMNS
from leveret.spark.wire import Deliveries, Positions, StreamConsumer

log = logging.getLogger(__name__)

_CONNECT_TIMEOUT = 10.0
_TS = pa.timestamp("us", tz="UTC")
_INT_PROPERTIES = ("delivery_mode", "priority")


def open_stream_consumer(
    url: str, stream: str, offset: int, prefetch: int, node: int = 0
) -> tuple[StreamConsumer, int]:
    """A consumer of ``stream`` from ``offset`` (``amqps://`` through TLS), on the first
    of the URLs (several separated by commas: one cluster's nodes) that answers, starting
    with the one at ``node``; and the index of that one."""
    urls = urls_of(url)
    for i in range(len(urls)):
        at = (node + i) % len(urls)
        try:
            return _open(urls[at], stream, offset, prefetch), at
        except AmqpSourceError as exc:
            if not exc.transient or i == len(urls) - 1:
                raise
            log.info("%s; trying the next node", exc)
    raise AssertionError("unreachable")


def _open(url: str, stream: str, offset: int, prefetch: int) -> StreamConsumer:
    try:
        params = parameters(url)
    except LogsError as exc:
        raise AmqpSourceError(str(exc)) from None
    creds = params.credentials
    tls = params.ssl_options
    try:
        consumer = StreamConsumer(
            params.host,
            params.port,
            params.virtual_host,
            creds.username,
            creds.password,
            prefetch,
            timeout=_CONNECT_TIMEOUT,
            ssl_context=None if tls is None else tls.context,
            server_hostname=None if tls is None else tls.server_hostname,
        )
    except (pika.exceptions.AMQPError, OSError) as exc:
        raise error_from(exc, url) from None
    try:
        consumer.consume(stream, offset)
    except (pika.exceptions.AMQPError, OSError) as exc:
        consumer.close()
        raise error_from(exc, url, f"reading stream {stream!r}") from None
    except BaseException:
        consumer.close()
        raise
    return consumer


# ----------------------------------------------------------------------------- batches
def message_batch(fields: Fields, offsets: Positions, rows: Positions) -> pa.RecordBatch:
    """The message rows (``schema.MESSAGE_SCHEMA``) of deliveries ``rows``."""
    cols: dict[str, pa.Array] = {
        "offset": pa.array(offsets[rows], pa.int64()),
        "exchange": fields.exchanges(rows),
        "routing_key": fields.routing_keys(rows),
        "redelivered": pa.array(fields.redelivered[rows], pa.bool_()),
    }
    for name in PROPERTY_COLUMNS:
        if name in _INT_PROPERTIES:
            value, there = fields.prop_octet(name)
            cols[name] = pa.array(value[rows].astype(np.int32), pa.int32(), mask=~there[rows])
        elif name == "timestamp":
            seconds, there = fields.timestamp()
            cols[name] = pa.array(seconds[rows] * 1_000_000, _TS, mask=~there[rows])
        else:
            cols[name] = fields.prop_string(name, rows)
    cols["headers"] = _headers(fields, offsets, rows)
    cols["body"] = fields.body_array(rows)
    return pa.RecordBatch.from_arrays([cols[f.name] for f in ARROW_SCHEMA], schema=ARROW_SCHEMA)


def _headers(fields: Fields, offsets: Positions, rows: Positions) -> pa.Array:
    """The headers tables as maps of strings. When every table holds only the stream
    offset (the usual case) the map is built from the offsets alone."""
    kind = ARROW_SCHEMA.field("headers").type
    there = fields.present["headers"][rows]
    if bool(fields.offset_only[rows].all()):
        n = len(rows)
        return pa.MapArray.from_arrays(
            pa.array(np.arange(n + 1, dtype=np.int32)),
            pa.array(np.full(n, "x-stream-offset", dtype=object), pa.string()),
            pa.array(offsets[rows].astype(str), pa.string()),
            type=kind,
        )
    values = []
    for i, present in zip(rows, there, strict=True):
        table = fields.headers(int(i)) if present else {}
        values.append([(str(k), header_text(v)) for k, v in table.items()] or None)
    return pa.array(values, kind)


def record_batch(fields: Fields, offsets: Positions, rows: Positions) -> pa.RecordBatch:
    """Deliveries ``rows`` parsed as log records (``schema.LOG_SCHEMA``)."""
    data, body_offsets = fields.bodies()
    bodies = Bodies(data, body_offsets)
    if len(rows) != fields.n:
        bodies = bodies.subset(rows)
    seconds, there = fields.timestamp()
    routing_keys = fields.routing_keys(rows)

    def node_of(j: int) -> str | None:
        i = int(rows[j])
        if not fields.present["headers"][i]:
            return None
        node = fields.headers(i).get("node")
        return None if node is None else header_text(node)

    def headers_of(j: int) -> Mapping[str, Any] | None:
        i = int(rows[j])
        return fields.headers(i) if fields.present["headers"][i] else None

    exchanges = fields.exchanges(rows)
    stamps: tuple[Positions | None, Mask | None] = (None, None)
    if not bool(fields.offset_only[rows].all()):
        stamps = header_times(
            [(headers_of(j) or {}).get(TIMESTAMP_HEADER) for j in range(len(rows))]
        )
    msgs = Messages(
        routing_key=routing_keys,
        content_type=fields.prop_string("content_type", rows),
        timestamp=seconds[rows],
        has_timestamp=there[rows],
        bodies=bodies,
        header_ms=stamps[0],
        has_header_ms=stamps[1],
    )
    kept = {
        "offset": pa.array(offsets[rows], pa.int64()),
        "routing_key": routing_keys,
        "redelivered": pa.array(fields.redelivered[rows], pa.bool_()),
        "message_id": fields.prop_string("message_id", rows),
    }
    return log_batch(msgs, exchanges, node_of, headers_of, kept)


# ----------------------------------------------------------------------------- the range
def read_stream_range(
    url: str,
    stream: str,
    start: int,
    end: int,
    *,
    prefetch: int = 20_000,
    stall_timeout: float = 60.0,
    fail_on_data_loss: bool = True,
    records: bool = False,
) -> Iterator[pa.RecordBatch]:
    """Every message of ``stream`` with ``start <= offset < end``, as Arrow batches of
    messages, or of log records with ``records``.

    A lost connection is retried from the next offset until nothing has been read for
    ``stall_timeout`` seconds, so a broker restart during a read costs time, not data.
    Offsets below the head (dropped by retention) are data loss: an error, or a warning
    with ``fail_on_data_loss=False``."""
    next_offset = start
    shown = redact(url)
    progress = RangeProgress(stream, shown, start, end, stall_timeout, fail_on_data_loss, log)
    node = 0
    while next_offset < end:
        consumer = None
        try:
            consumer, node = open_stream_consumer(url, stream, next_offset, prefetch, node)
            unacked = 0
            first = True
            while next_offset < end:
                block = consumer.read(0.05)
                if block is None:
                    progress.check(next_offset)
                    continue
                progress.moved()
                unacked += len(block)
                if unacked >= prefetch // 4:
                    consumer.ack(block.last_tag)  # acks on a stream return credit
                    unacked = 0
                batch, next_offset, first = _take(block, progress, next_offset, end, first, records)
                if batch is not None:
                    yield batch
        except AmqpSourceError as exc:
            if not progress.retry(exc, next_offset):
                raise
            node += 1  # another node of the cluster, if there is one
        except (pika.exceptions.AMQPError, OSError) as exc:
            err = error_from(exc, url, f"reading stream {stream!r}")
            if not progress.retry(err, next_offset):
                raise err from None
            node += 1
        finally:
            if consumer is not None:
                consumer.close()


def _take(
    block: Deliveries,
    progress: RangeProgress,
    next_offset: int,
    end: int,
    first: bool,
    records: bool,
) -> tuple[pa.RecordBatch | None, int, bool]:
    """The rows of a block that belong to ``[next_offset, end)``: (their batch, the next
    offset wanted, whether the range's first offset is still to come)."""
    fields = Fields(block)
    offsets = fields.offsets()
    if bool((offsets == NO_OFFSET).any()):
        raise AmqpSourceError(
            f"queue {progress.stream!r} on {progress.shown} is not a stream (its deliveries "
            "carry no x-stream-offset)"
        )
    # a consumer starts at the chunk that holds the offset: skip what comes before it
    wanted = offsets >= next_offset
    if first and bool(wanted.any()):
        got = int(offsets[np.argmax(wanted)])
        if got > next_offset:
            progress.lost(next_offset, got)
        first = False
    rows = np.flatnonzero(wanted & (offsets < end))
    past_end = bool((offsets >= end).any())
    if not len(rows):
        return None, end if past_end else next_offset, first
    following = int(offsets[rows[-1]]) + 1
    batch = record_batch(fields, offsets, rows) if records else message_batch(fields, offsets, rows)
    return batch, end if past_end else following, first


__all__ = ["message_batch", "open_stream_consumer", "read_stream_range", "record_batch"]
