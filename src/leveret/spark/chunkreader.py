"""Reading an offset range of a stream on an executor over the stream protocol: one
subscription at the range's start (offset spec ``offset``), credit for several chunks kept
topped up, each chunk checked and walked (:mod:`leveret.spark.chunks`), and Arrow batches of
at least :data:`BATCH_ROWS` records (or what is left of the range) handed to Spark.

A lost connection is retried from the next offset until nothing has been read for the stall
timeout, as the AMQP 0-9-1 reader does (:func:`leveret.spark.reader.read_stream_range`).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence

import pyarrow as pa

from leveret.protocol.stream.spec import OffsetType
from leveret.spark.chunks import Columns
from leveret.spark.client import AmqpSourceError, RangeProgress
from leveret.spark.streamclient import StreamClient, open_any, targets_of

log = logging.getLogger(__name__)

#: Rows per batch handed to Spark: the parser and the hand-off have a fixed cost per batch.
BATCH_ROWS = 10_000
#: Chunks in flight to a reader, and how many are given back at a time. Chunks of a stream
#: fed over AMQP 0-9-1 are small (RabbitMQ 3.10.8 wrote ~5 records a chunk for a publisher
#: with 2,000 unconfirmed messages in flight), so the credit is large; TCP, not the credit,
#: bounds what is buffered.
CREDIT = 256
CREDIT_BATCH = 64
_SUBSCRIPTION = 1


def read_chunk_range(
    url: str,
    stream: str,
    start: int,
    end: int,
    *,
    stream_port: int | None = None,
    members: Sequence[tuple[str, int]] = (),
    stall_timeout: float = 60.0,
    fail_on_data_loss: bool = True,
    records: bool = False,
    batch_rows: int = BATCH_ROWS,
) -> Iterator[pa.RecordBatch]:
    """Every message of ``stream`` with ``start <= offset < end``, as Arrow batches of
    messages, or of log records with ``records``. ``url``: one URL, or several separated by
    commas (one cluster's nodes: a lost connection is opened again on the next one);
    ``stream_port`` None: 5552, or 5551 for ``amqps://``; ``members``: the stream's nodes
    (host, stream port) as Metadata named them, tried after the URLs' nodes."""
    targets = targets_of(url, stream_port, members)
    shown = targets[0].shown
    node = 0
    next_offset = start
    progress = RangeProgress(stream, shown, start, end, stall_timeout, fail_on_data_loss, log)
    first = True
    cols = Columns(full=not records)
    while next_offset < end:
        client: StreamClient | None = None
        try:
            client, node = open_any(targets, stream, node)
            client.subscribe(_SUBSCRIPTION, stream, OffsetType.OFFSET, next_offset, CREDIT)
            owed = 0
            while next_offset < end:
                frame = client.chunk(_SUBSCRIPTION, 0.05)
                if frame is None:
                    progress.check(next_offset)
                    continue
                owed += 1
                if owed >= CREDIT_BATCH:
                    client.credit(_SUBSCRIPTION, owed)
                    owed = 0
                progress.moved()
                chunk_first, chunk_end = cols.add_chunk(frame, next_offset, end)
                if chunk_end <= next_offset:
                    continue  # before the range (a chunk seen before a reconnect)
                if first:
                    if chunk_first > next_offset:
                        progress.lost(next_offset, chunk_first)
                    first = False
                next_offset = min(chunk_end, end)
                if len(cols) >= batch_rows or (next_offset >= end and len(cols)):
                    batch = cols.records() if records else cols.messages()
                    cols = Columns(full=not records)
                    yield batch
        except AmqpSourceError as exc:
            if not progress.retry(exc, next_offset):
                raise
            node += 1  # another node of the cluster, if there is one
        finally:
            if client is not None:
                client.close()
    if len(cols):
        yield cols.records() if records else cols.messages()


__all__ = ["BATCH_ROWS", "read_chunk_range"]
