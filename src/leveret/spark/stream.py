"""Reading a stream queue: the streaming reader (exactly-once into an idempotent sink such as
the file sink) and the batch reader of an offset range.

The driver plans, the executors read. On the driver ``latestOffset`` finds the tail of the
stream (see :mod:`leveret.spark.client` for how, on Leveret and on RabbitMQ) and
``partitions`` cuts ``[start, end)`` into contiguous offset ranges. Each executor task opens
its own connection and consumes its range from ``x-stream-offset: start``. The offsets
Spark writes to its checkpoint are JSON, ``{"stream": "logs", "offset": 1200}``, where
``offset`` is the first offset *not* yet read. A stream never changes what an offset holds,
so a batch replayed after a crash reads exactly the same messages: with the file sink's
``_spark_metadata`` log that makes the query exactly-once end to end.
"""

from __future__ import annotations

import dataclasses
import logging
import math
from collections.abc import Iterator, Sequence
from typing import Any, Protocol

import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)

from leveret.spark.chunkreader import read_chunk_range
from leveret.spark.client import (
    AmqpSourceError,
    close_quietly,
    connect,
    offset_at,
    stream_head,
    stream_tail,
)
from leveret.spark.options import Position, ReadOptions, checkpoint_position
from leveret.spark.reader import read_stream_range
from leveret.spark.streamclient import StreamClient, TailProbe, Target, open_any, targets_of

log = logging.getLogger(__name__)

#: Ranges smaller than this are not split further: a task costs a connection.
MIN_RECORDS_PER_PARTITION = 1000
#: How long ``protocol=auto`` waits for a node's stream port (connect, log in, Metadata).
AUTO_TIMEOUT = 3.0


class RangePartition(InputPartition):
    """Offsets ``start <= offset < end`` of one stream, read by one task."""

    def __init__(self, start: int, end: int) -> None:
        super().__init__((start, end))
        self.start = start
        self.end = end


def plan_ranges(
    start: int, end: int, min_partitions: int, max_per_partition: int
) -> list[RangePartition]:
    """``[start, end)`` cut into contiguous ranges of near-equal size."""
    n = end - start
    if n <= 0:
        return []
    parts = max(
        math.ceil(n / max_per_partition),
        min(min_partitions, max(1, n // MIN_RECORDS_PER_PARTITION)),
    )
    if parts > min_partitions:
        # a whole number of rounds over the cores: 3 ranges on 2 cores take as long as 4
        parts = math.ceil(parts / min_partitions) * min_partitions
    step, extra = divmod(n, parts)
    out: list[RangePartition] = []
    lo = start
    for i in range(parts):
        hi = lo + step + (1 if i < extra else 0)
        out.append(RangePartition(lo, hi))
        lo = hi
    return out


def _stream(opts: ReadOptions) -> str:
    assert opts.stream is not None
    return opts.stream


def _planner_logging(logger: logging.Logger = log) -> None:
    """Spark plans a Python streaming source in a Python process of its own, whose logging
    nobody configures (its INFO lines went nowhere) and whose stderr is the driver's: there,
    this module's lines (which protocol ``auto`` chose, and why) go to stderr, formatted
    as the pipeline commands format theirs. A process whose logging is configured keeps it."""
    if logging.getLogger().handlers or logger.handlers:
        return
    handler = logging.StreamHandler()
    handler.setFormatter(logging.Formatter("%(asctime)s [%(levelname)s] %(name)s: %(message)s"))
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    logger.propagate = False


def choose_protocol(opts: ReadOptions) -> tuple[ReadOptions, StreamClient | None]:
    """The options with ``protocol=auto`` settled, once, on the driver: ``stream`` when the
    stream port of one of the URLs' nodes answers, logs in and holds the stream (asked with
    Metadata), else ``amqp``. With ``stream``, the connection that answered (to be held
    for finding the stream's end)."""
    if opts.protocol != "auto":
        return opts, None
    try:
        targets = targets_of(opts.url, opts.stream_port)
        client, _ = open_any(targets, _stream(opts), timeout=AUTO_TIMEOUT)
    except AmqpSourceError as exc:
        log.info("reading stream %r over AMQP 0-9-1: %s", opts.stream, exc)
        return dataclasses.replace(opts, protocol="amqp"), None
    # the port must be the same broker's (another broker on the same machine may answer
    # on 5552, even with a stream of that name): both protocols name the same cluster
    mine = _amqp_cluster_name(opts.url)
    theirs = client.server_properties.get("cluster_name")
    if mine is not None and theirs != mine:
        client.close()
        log.info(
            "reading stream %r over AMQP 0-9-1: the stream port %s:%d belongs to cluster "
            "%r, not %r",
            opts.stream,
            client.host,
            client.target.port,
            theirs,
            mine,
        )
        return dataclasses.replace(opts, protocol="amqp"), None
    members = tuple(client.members)
    log.info("reading stream %r over the stream protocol (%s:%d)", opts.stream, client.host,
             client.target.port)  # fmt: skip
    return dataclasses.replace(opts, protocol="stream", stream_members=members), client


def _amqp_cluster_name(url: str) -> str | None:
    """The ``cluster_name`` a broker announces over AMQP 0-9-1 (None: unknown)."""
    try:
        conn = connect(url)
    except AmqpSourceError:
        return None
    try:
        props = conn._impl.server_properties or {}
        name = props.get("cluster_name")
        return name.decode() if isinstance(name, bytes) else None if name is None else str(name)
    finally:
        close_quietly(conn)


def _targets(opts: ReadOptions) -> list[Target]:
    return targets_of(opts.url, opts.stream_port, opts.stream_members)


def _probe(opts: ReadOptions, client: StreamClient | None = None) -> TailProbe:
    return TailProbe(_targets(opts), _stream(opts), client)


def stream_end(opts: ReadOptions, probe: TailProbe | None) -> int:
    if probe is not None:
        return probe.tail(opts.probe_timeout)
    return stream_tail(opts.url, _stream(opts), wait=opts.probe_timeout)


def resolve(opts: ReadOptions, pos: Position, probe: TailProbe | None = None) -> int:
    """An absolute offset for a position, asked of the broker on the driver (over the
    stream protocol with ``probe``)."""
    stream = _stream(opts)
    if pos.kind == "offset":
        return pos.offset
    if probe is not None:
        if pos.kind == "earliest":
            head = probe.head(opts.probe_timeout)
            return 0 if head is None else head
        tail = probe.tail(opts.probe_timeout)
        if pos.kind == "latest":
            return tail
        assert pos.time is not None
        got = probe.at_time(int(pos.time.timestamp() * 1000), opts.probe_timeout)
        return tail if got is None else got
    if pos.kind == "earliest":
        head = stream_head(opts.url, stream, wait=opts.probe_timeout)
        return 0 if head is None else head
    tail = stream_tail(opts.url, stream, wait=opts.probe_timeout)
    if pos.kind == "latest":
        return tail
    assert pos.time is not None
    found = offset_at(opts.url, stream, pos.time, wait=opts.probe_timeout)
    return tail if found is None else found


def _read(opts: ReadOptions, partition: InputPartition) -> Iterator[pa.RecordBatch]:
    assert isinstance(partition, RangePartition)
    args = (opts.url, _stream(opts), partition.start, partition.end)
    common: dict[str, Any] = {
        "stall_timeout": opts.stall_timeout,
        "fail_on_data_loss": opts.fail_on_data_loss,
        "records": opts.records,
    }
    if opts.protocol == "stream":
        return read_chunk_range(
            *args, stream_port=opts.stream_port, members=opts.stream_members, **common
        )
    return read_stream_range(*args, prefetch=opts.prefetch, **common)


class _Closes(Protocol):
    def close(self) -> None: ...


class OffsetsReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """What Structured Streaming from a stream and from a super stream share: the read
    limit ``maxRecordsPerTrigger`` sets, nothing to do at a commit, and at the stop the
    closing of ``_held``, the driver's stream-protocol connections (None: it holds none)."""

    opts: ReadOptions
    _held: _Closes | None

    def getDefaultReadLimit(self) -> ReadLimit:
        n = self.opts.max_records_per_trigger
        return ReadAllAvailable() if n is None else ReadMaxRows(n)

    def commit(self, end: dict[str, Any]) -> None:
        """Nothing to do: a stream keeps its messages whatever consumers do."""

    def stop(self) -> None:
        if self._held is not None:
            self._held.close()


class StreamQueueStreamReader(OffsetsReader):
    """Structured Streaming from a stream queue (``option("stream", ...)``)."""

    _held: TailProbe | None

    def __init__(self, opts: ReadOptions) -> None:
        _planner_logging()
        self.opts, client = choose_protocol(opts)
        self._target: int | None = None  # the tail fixed by availableNow
        # the driver's one held stream-protocol connection (dropped when pickled)
        self._held = _probe(self.opts, client) if self.opts.protocol == "stream" else None

    def _offset(self, offset: dict[str, Any]) -> int:
        return checkpoint_position(offset, "stream", self.opts.stream, "offset")

    def _json(self, offset: int) -> dict[str, Any]:
        return {"stream": self.opts.stream, "offset": offset}

    def initialOffset(self) -> dict[str, Any]:
        return self._json(resolve(self.opts, self.opts.starting, self._held))

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = stream_end(self.opts, self._held)

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        begin = self._offset(start)
        tail = self._target
        if tail is None:
            tail = stream_end(self.opts, self._held)
        end = max(begin, tail)
        if isinstance(limit, ReadMaxRows):
            end = min(end, begin + limit.max_rows)
        return self._json(end)

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        return plan_ranges(
            self._offset(start),
            self._offset(end),
            self.opts.min_partitions,
            self.opts.max_records_per_partition,
        )

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return _read(self.opts, partition)


class StreamQueueBatchReader(DataSourceReader):
    """A batch read of ``[startingOffsets, endingOffsets)`` of a stream queue."""

    def __init__(self, opts: ReadOptions) -> None:
        self.opts, client = choose_protocol(opts)
        if client is not None:
            client.close()  # the reader is pickled: partitions() opens its own

    def partitions(self) -> Sequence[InputPartition]:
        probe = _probe(self.opts) if self.opts.protocol == "stream" else None
        try:
            start = resolve(self.opts, self.opts.starting, probe)
            end = resolve(self.opts, self.opts.ending, probe)
        finally:
            if probe is not None:
                probe.close()
        ranges = plan_ranges(
            start, end, self.opts.min_partitions, self.opts.max_records_per_partition
        )
        return ranges or [RangePartition(start, start)]  # an empty read still needs a task

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return _read(self.opts, partition)
