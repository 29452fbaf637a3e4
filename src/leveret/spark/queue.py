"""Structured Streaming from a classic queue (``option("queue", ...)``): at-least-once.

A classic queue forgets a message once it is acked, and a delivery can only be acked on the
channel that received it. So this reader consumes on the *driver*, in the reader Spark keeps
for the whole query (its connection is opened lazily there and never pickled), and it acks
only after Spark has committed the batch that holds the message.

The source-side write-ahead log
-------------------------------
Between receiving a message and acking it, the message exists only in the broker's unacked
set: if the driver dies the broker requeues it, and a batch Spark replays from its offset
log must still find the same rows. So before ``latestOffset`` hands Spark a new end offset it
writes the batch to ``walLocation`` (option, required):

1. the deliveries get the source's own sequence numbers ``start .. end-1`` (the ``offset``
   column; Spark's checkpoint holds ``{"queue": "q", "seq": end}``);
2. they are written as one Arrow IPC file ``<start>-<end>.arrow``, fsynced, then renamed
   into place (and the directory fsynced): only then is ``end`` returned to Spark;
3. ``partitions(start, end)`` ships the rows of that range inside the input partition, so
   executors never need the driver's disk; after a restart the rows come from the file;
4. ``commit(end)`` (Spark calls it once the batch is in the sink's commit log; it lags one
   batch behind) acks every delivery up to ``end`` with one ``basic.ack(multiple)``, then
   deletes the files that end at or before ``end``.

What a crash costs: deliveries that were received but not yet acked are requeued by the
broker and delivered again with ``redelivered = true``. Those already written to the sink
(the batch committed, the ack not yet sent) then appear twice; no message is lost. Any
duplicate in the sink is therefore a row whose ``redelivered`` column is true.

Spark calls ``commit`` one batch late, and not at all for the last batch of a query that
ends (``availableNow``; nor does it call ``stop`` on the reader then). Given the option
``checkpointLocation`` (the query's own), the reader also reads the query's commit log each
time ``latestOffset`` is called and acks up to the last batch committed there, so nothing
waits for the next batch; without it, the last batch of a run is redelivered by the next.

Keep ``walLocation`` on the driver's durable disk next to the checkpoint; ``leveret pipeline
ingest --queue`` puts it under ``<checkpoint>/amqp-wal`` and passes ``checkpointLocation``.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from collections import deque
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pika.exceptions
import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)

from leveret.durable import fsync_path
from leveret.spark.client import AmqpSourceError, check_queue, close_quietly, connect, error_from
from leveret.spark.logparse import records_from_messages
from leveret.spark.options import ReadOptions, checkpoint_position
from leveret.spark.schema import ARROW_SCHEMA, DEFAULT_KEEP, LOG_ARROW_SCHEMA, BatchBuilder

log = logging.getLogger(__name__)

DEFAULT_MAX_RECORDS_PER_TRIGGER = 10_000
_GATHER_SECONDS = 0.25  # how long latestOffset waits for deliveries to arrive
_IDLE_SECONDS = 0.05


class WalPartition(InputPartition):
    """Sequence numbers ``start .. end-1`` and their rows (Arrow IPC stream bytes)."""

    def __init__(self, start: int, end: int, payload: bytes) -> None:
        super().__init__((start, end))
        self.start = start
        self.end = end
        self.payload = payload


def _ipc_bytes(batch: pa.RecordBatch) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, ARROW_SCHEMA) as writer:
        writer.write_batch(batch)
    return bytes(sink.getvalue().to_pybytes())


class WriteAheadLog:
    """One Arrow IPC file per planned batch, written atomically."""

    def __init__(self, location: str) -> None:
        self.dir = Path(location)
        self.dir.mkdir(parents=True, exist_ok=True)

    def _path(self, start: int, end: int) -> Path:
        return self.dir / f"{start:020d}-{end:020d}.arrow"

    def _ranges(self) -> list[tuple[int, int, Path]]:
        out = []
        for p in self.dir.glob("*.arrow"):
            a, _, b = p.stem.partition("-")
            with contextlib.suppress(ValueError):
                out.append((int(a), int(b), p))
        return sorted(out)

    def write(self, start: int, end: int, payload: bytes) -> None:
        path = self._path(start, end)
        tmp = path.with_suffix(".tmp")
        with open(tmp, "wb") as f:
            f.write(payload)
            f.flush()
            os.fsync(f.fileno())
        # a stale file for the same start (planned, never logged by Spark) is replaced
        for a, b, p in self._ranges():
            if a == start and b != end:
                p.unlink(missing_ok=True)
        os.replace(tmp, path)
        fsync_path(self.dir)

    def read(self, start: int, end: int) -> bytes:
        """The rows of ``[start, end)``, from the files that cover it exactly."""
        pieces = [(a, b, p) for a, b, p in self._ranges() if start <= a and b <= end]
        covered = start
        batches: list[pa.RecordBatch] = []
        for a, b, p in pieces:
            if a != covered:
                break
            with pa.ipc.open_stream(p.read_bytes()) as reader:
                batches.extend(reader)
            covered = b
        if covered != end:
            raise AmqpSourceError(
                f"the write-ahead log in {self.dir} has no rows for sequence numbers "
                f"{covered}..{end - 1}; was walLocation changed or emptied?"
            )
        table = pa.Table.from_batches(batches, schema=ARROW_SCHEMA).combine_chunks()
        merged = table.to_batches()
        return _ipc_bytes(merged[0] if merged else ARROW_SCHEMA.empty_table().to_batches()[0])

    def drop_through(self, end: int) -> None:
        for _a, b, p in self._ranges():
            if b <= end:
                p.unlink(missing_ok=True)


class ClassicQueueStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """At-least-once streaming from a classic queue, acking after the batch commits."""

    def __init__(self, opts: ReadOptions) -> None:
        if not opts.wal_location:
            raise AmqpSourceError(
                "option walLocation is required with queue: the at-least-once reader keeps "
                "a write-ahead log of the deliveries it has not acked yet (put it next to the "
                "checkpoint)"
            )
        self.opts = opts
        # driver-side state, created lazily in the long-lived planner process
        self._conn: Any = None
        self._ch: Any = None
        self._buffer: list[tuple[Any, Any, bytes]] = []
        self._unacked: deque[tuple[int, int]] = deque()  # (batch end, last delivery tag)
        self._planned: dict[int, tuple[int, bytes]] = {}  # start -> (end, rows)
        self._budget: int | None = None  # availableNow: messages still to take

    def __getstate__(self) -> dict[str, Any]:
        # executors get the reader for read(); the driver's connection stays behind
        return {"opts": self.opts}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["opts"])  # type: ignore[misc]

    # -------------------------------------------------------------- connection
    @property
    def _queue(self) -> str:
        assert self.opts.queue is not None
        return self.opts.queue

    @property
    def _prefetch(self) -> int:
        per_trigger = self.opts.max_records_per_trigger or DEFAULT_MAX_RECORDS_PER_TRIGGER
        return min(65_535, max(self.opts.prefetch, 2 * per_trigger))

    def _ensure(self) -> None:
        if self._conn is not None and self._conn.is_open:
            return
        self._drop_connection()
        # heartbeats off: nothing services this connection between triggers, and a long
        # batch must not cost the broker's patience (which would requeue everything)
        conn = connect(self.opts.url, heartbeat=0)
        try:
            check_queue(conn, self.opts.url, self._queue, kind="queue")
            ch = conn.channel()
            ch.basic_qos(prefetch_count=self._prefetch)
            ch.basic_consume(
                self._queue, lambda _c, m, p, b: self._buffer.append((m, p, b)), auto_ack=False
            )
        except Exception:
            close_quietly(conn)
            raise
        self._conn, self._ch = conn, ch

    def _drop_connection(self) -> None:
        if self._conn is not None:
            close_quietly(self._conn)
        # deliveries of a lost channel cannot be acked: the broker requeues them
        self._conn = self._ch = None
        self._buffer.clear()
        self._unacked.clear()

    def _pump(self, want: int) -> None:
        started = last = time.monotonic()
        seen = len(self._buffer)
        try:
            while len(self._buffer) < want:
                self._conn.process_data_events(0.01)
                now = time.monotonic()
                if len(self._buffer) != seen:
                    seen, last = len(self._buffer), now
                elif self._buffer and now - last >= _IDLE_SECONDS:
                    break
                if now - started >= _GATHER_SECONDS:
                    break
        except (pika.exceptions.AMQPError, OSError) as exc:
            self._drop_connection()
            raise error_from(exc, self.opts.url, f"consuming from queue {self._queue!r}") from None

    # -------------------------------------------------------------- offsets
    def _seq(self, offset: dict[str, Any]) -> int:
        return checkpoint_position(offset, "queue", self.opts.queue, "seq")

    def _json(self, seq: int) -> dict[str, Any]:
        return {"queue": self.opts.queue, "seq": seq}

    def initialOffset(self) -> dict[str, Any]:
        return self._json(0)

    def getDefaultReadLimit(self) -> ReadLimit:
        return ReadMaxRows(self.opts.max_records_per_trigger or DEFAULT_MAX_RECORDS_PER_TRIGGER)

    def prepareForTriggerAvailableNow(self) -> None:
        conn = connect(self.opts.url)
        try:
            self._budget = check_queue(conn, self.opts.url, self._queue, kind="queue")
        finally:
            close_quietly(conn)

    def _ack_committed(self) -> None:
        if not (self._unacked and self.opts.checkpoint_location):
            return
        try:
            seq = committed_seq(Path(self.opts.checkpoint_location), self._queue)
        except OSError:
            return
        if seq is not None:
            self.commit(self._json(seq))

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        self._ack_committed()
        begin = self._seq(start)
        if begin in self._planned:
            return self._json(self._planned[begin][0])
        want = limit.max_rows if isinstance(limit, ReadMaxRows) else self._prefetch
        if self._budget is not None:
            want = min(want, self._budget)
            if want <= 0:
                return self._json(begin)
        self._ensure()
        self._pump(want)
        taken, self._buffer = self._buffer[:want], self._buffer[want:]
        if not taken:
            return self._json(begin)
        builder = BatchBuilder()
        for i, (method, props, body) in enumerate(taken):
            builder.add(
                begin + i, method.exchange, method.routing_key, method.redelivered, props, body
            )
        end = begin + len(taken)
        payload = _ipc_bytes(builder.build())
        WriteAheadLog(self.opts.wal_location or "").write(begin, end, payload)
        self._planned[begin] = (end, payload)
        self._unacked.append((end, taken[-1][0].delivery_tag))
        if self._budget is not None:
            self._budget -= len(taken)
        return self._json(end)

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        a, b = self._seq(start), self._seq(end)
        if a >= b:
            return []
        planned = self._planned.get(a)
        if planned is not None and planned[0] == b:
            payload = planned[1]
        else:  # replaying a batch planned before a restart
            payload = WriteAheadLog(self.opts.wal_location or "").read(a, b)
        return [WalPartition(a, b, payload)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, WalPartition)
        with pa.ipc.open_stream(partition.payload) as reader:
            if self.opts.records:
                yield from records_from_messages(iter(reader), DEFAULT_KEEP, LOG_ARROW_SCHEMA)
            else:
                yield from reader

    def commit(self, end: dict[str, Any]) -> None:
        seq = self._seq(end)
        last_tag = None
        while self._unacked and self._unacked[0][0] <= seq:
            last_tag = self._unacked.popleft()[1]
        for s in [s for s, (e, _) in self._planned.items() if e <= seq]:
            del self._planned[s]
        if last_tag is not None and self._ch is not None and self._ch.is_open:
            try:
                self._ch.basic_ack(last_tag, multiple=True)
                self._conn.process_data_events(0)
            except (pika.exceptions.AMQPError, OSError) as exc:
                log.warning(
                    "queue %r: acking failed (%s); the broker will redeliver", self._queue, exc
                )
                self._drop_connection()
        WriteAheadLog(self.opts.wal_location or "").drop_through(seq)

    def stop(self) -> None:
        self._ack_committed()
        self._drop_connection()


def committed_seq(checkpoint: Path, queue: str) -> int | None:
    """The end offset of ``queue`` in the last batch in the query's commit log: Spark writes
    ``commits/<id>`` once batch ``id`` is in the sink, and ``offsets/<id>`` holds the
    batch's source offsets, one JSON line per source after the version and metadata lines."""
    import json

    commits = [int(p.name) for p in (checkpoint / "commits").glob("*") if p.name.isdigit()]
    if not commits:
        return None
    lines = (checkpoint / "offsets" / str(max(commits))).read_text().splitlines()[2:]
    for line in lines:
        with contextlib.suppress(ValueError):
            doc = json.loads(line)
            if isinstance(doc, dict) and doc.get("queue") == queue and "seq" in doc:
                return int(doc["seq"])
    return None
