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
import math
from collections.abc import Iterator, Sequence
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)

from leveret.spark.chunkreader import read_chunk_range
from leveret.spark.client import AmqpSourceError, offset_at, stream_head, stream_tail
from leveret.spark.options import Position, ReadOptions
from leveret.spark.reader import read_stream_range
from leveret.spark.streamclient import TailProbe, Target, port_answers

#: Ranges smaller than this are not split further: a task costs a connection.
MIN_RECORDS_PER_PARTITION = 1000


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


def choose_protocol(opts: ReadOptions) -> ReadOptions:
    """The options with ``protocol=auto`` settled, once, on the driver: ``stream`` when the
    stream port of the URL's (first) host answers, else ``amqp``."""
    if opts.protocol != "auto":
        return opts
    try:
        target = Target.of(opts.url.split(",")[0], opts.stream_port)
    except AmqpSourceError:  # TLS: not read over the stream protocol yet
        return dataclasses.replace(opts, protocol="amqp")
    found = "stream" if port_answers(target.host, target.port) else "amqp"
    return dataclasses.replace(opts, protocol=found)


def _probe(opts: ReadOptions) -> TailProbe:
    return TailProbe(Target.of(opts.url.split(",")[0], opts.stream_port), _stream(opts))


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
    if opts.protocol == "stream":
        return read_chunk_range(
            opts.url.split(",")[0],
            _stream(opts),
            partition.start,
            partition.end,
            stream_port=opts.stream_port,
            stall_timeout=opts.stall_timeout,
            fail_on_data_loss=opts.fail_on_data_loss,
            records=opts.records,
        )
    return read_stream_range(
        opts.url,
        _stream(opts),
        partition.start,
        partition.end,
        prefetch=opts.prefetch,
        stall_timeout=opts.stall_timeout,
        fail_on_data_loss=opts.fail_on_data_loss,
        records=opts.records,
    )


class StreamQueueStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Structured Streaming from a stream queue (``option("stream", ...)``)."""

    def __init__(self, opts: ReadOptions) -> None:
        self.opts = choose_protocol(opts)
        self._target: int | None = None  # the tail fixed by availableNow
        # the driver's one held stream-protocol connection (dropped when pickled)
        self._probe = _probe(self.opts) if self.opts.protocol == "stream" else None

    def _offset(self, offset: dict[str, Any]) -> int:
        stream = offset.get("stream")
        if stream != self.opts.stream:
            raise AmqpSourceError(
                f"the checkpoint holds offsets of stream {stream!r}, not "
                f"{self.opts.stream!r}; use a new checkpoint location for another stream"
            )
        return int(offset["offset"])

    def _json(self, offset: int) -> dict[str, Any]:
        return {"stream": self.opts.stream, "offset": offset}

    def initialOffset(self) -> dict[str, Any]:
        return self._json(resolve(self.opts, self.opts.starting, self._probe))

    def getDefaultReadLimit(self) -> ReadLimit:
        n = self.opts.max_records_per_trigger
        return ReadAllAvailable() if n is None else ReadMaxRows(n)

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = stream_end(self.opts, self._probe)

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        begin = self._offset(start)
        tail = self._target
        if tail is None:
            tail = stream_end(self.opts, self._probe)
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

    def commit(self, end: dict[str, Any]) -> None:
        """Nothing to do: a stream keeps its messages whatever consumers do."""

    def stop(self) -> None:
        if self._probe is not None:
            self._probe.close()


class StreamQueueBatchReader(DataSourceReader):
    """A batch read of ``[startingOffsets, endingOffsets)`` of a stream queue."""

    def __init__(self, opts: ReadOptions) -> None:
        self.opts = choose_protocol(opts)

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
