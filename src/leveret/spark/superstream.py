"""Reading a super stream (``option("superStream", ...)``): every partition, exactly-once
per partition.

A super stream is a direct exchange whose partitions are stream queues (see
:mod:`leveret.logs.superstream`). The driver finds the partitions once, when the reader is
made (each query start): with the stream protocol's Partitions command on the stream port
(RabbitMQ answers it from 3.9 on, Leveret in both of its modes), or, where no stream port
answers, from the exchange's bindings through the management API
(``managementUrl``). Either way the port must be the broker's own: it must name the same
cluster as the AMQP URL.

Each partition is then read as one stream is (:mod:`leveret.spark.stream`): its tail found
on the driver, its ``[start, end)`` cut into offset ranges, each range read by a task of its
own over the stream protocol or AMQP 0-9-1. One micro-batch holds the ranges of every
partition that has new records: a task set per partition, side by side on the cores.

Offsets are kept per partition. The checkpoint holds ``{"superStream": "logs",
"partitions": {"logs-0": 1200, "logs-1": 1187, ...}}``, each the first offset of that
partition not yet read; a batch replayed after a crash reads the same ranges of the same
partitions, so with the file sink's log each record is in the lake once. A partition bound
to the super stream after the checkpoint was made is read from its first offset; one that
is no longer bound keeps its offset and is not read. ``maxRecordsPerTrigger`` is shared
among the partitions that have records waiting, none getting more than an equal share
while others still want theirs.
"""

from __future__ import annotations

import dataclasses
import logging
import math
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadLimit,
    ReadMaxRows,
)

from leveret.logs.amqp import LogsError
from leveret.spark.client import AmqpSourceError
from leveret.spark.options import Position, ReadOptions
from leveret.spark.stream import (
    AUTO_TIMEOUT,
    OffsetsReader,
    RangePartition,
    _amqp_cluster_name,
    _planner_logging,
    _probe,
    _read,
    choose_protocol,
    plan_ranges,
    resolve,
    stream_end,
)
from leveret.spark.streamclient import StreamClient, TailProbe, targets_of

log = logging.getLogger(__name__)


class PartitionRange(InputPartition):
    """Offsets ``start <= offset < end`` of one partition, read by one task. ``fresh``: the
    partition was not in the checkpoint, and offsets below its head were never there to
    read (retention dropped them before the query knew the partition): not data loss."""

    def __init__(self, stream: str, start: int, end: int, fresh: bool = False) -> None:
        super().__init__((stream, start, end))
        self.stream = stream
        self.start = start
        self.end = end
        self.fresh = fresh


# ------------------------------------------------------------------------ the partitions
def _same_cluster(theirs: object, url: str, what: str) -> None:
    mine = _amqp_cluster_name(url)
    if mine is not None and theirs is not None and str(theirs) != mine:
        raise AmqpSourceError(
            f"{what} belongs to cluster {theirs!r}, not to {mine!r} (the broker of the URL): "
            "give the broker's own port (--stream-port, --management-url)"
        )


def _from_stream_port(opts: ReadOptions, name: str) -> list[str] | None:
    """The partitions by the Partitions command, on the first of the URLs' stream ports
    that answers; None when none answers or the broker refuses the command."""
    for target in targets_of(opts.url, opts.stream_port):
        try:
            client = StreamClient(target, AUTO_TIMEOUT)
        except AmqpSourceError as exc:
            log.info("super stream %r: no stream port at %s:%d (%s)", name, target.host,
                     target.port, exc)  # fmt: skip
            continue
        try:
            try:
                _same_cluster(client.server_properties.get("cluster_name"), opts.url,
                              f"the stream port {target.host}:{target.port}")  # fmt: skip
            except AmqpSourceError as exc:  # another broker's port: not this one's word
                log.info("super stream %r: %s", name, exc)
                continue
            try:
                return client.partitions(name)
            except AmqpSourceError as exc:
                if "does not exist" in str(exc):
                    raise
                log.info("super stream %r: %s; asking the management API", name, exc)
                return None
        finally:
            client.close()
    return None


def discover(opts: ReadOptions) -> list[str]:
    """The super stream's partitions, in order: by the stream protocol's Partitions
    command, else from its exchange's bindings in the management API."""
    name = opts.super_stream
    assert name is not None
    found = _from_stream_port(opts, name)
    how = "the Partitions command"
    if found is None:
        from leveret.logs.superstream import ManagementApi

        try:
            api = ManagementApi.of(opts.url, opts.management_url)
            _same_cluster(api.cluster_name(), opts.url, f"the management API at {api.base}")
            found = [p.stream for p in api.partitions(name)]
        except LogsError as exc:
            raise AmqpSourceError(
                f"cannot find the partitions of super stream {name!r}: {exc}",
                transient=exc.transient,
            ) from None
        how = "its exchange's bindings"
    if not found:
        raise AmqpSourceError(f"super stream {name!r} has no partitions (no stream is bound to "
                              f"exchange {name!r})")  # fmt: skip
    log.info("super stream %r: partitions %s (from %s)", name, ", ".join(found), how)
    return found


def share(wanted: Mapping[str, int], limit: int) -> dict[str, int]:
    """``limit`` records shared among partitions that want ``wanted`` each: water-filling,
    so that none gets more than an equal share while another still wants its own, and the
    whole limit is used when the partitions want it."""
    out = dict.fromkeys(wanted, 0)
    left = limit
    open_ = sorted((n for n in wanted if wanted[n] > 0), key=lambda n: wanted[n])
    while open_ and left > 0:
        each = left // len(open_)
        if each == 0:  # fewer records left than partitions: one each, in order
            for n in open_[:left]:
                out[n] += 1
            break
        smallest = open_[0]
        take = min(each, wanted[smallest] - out[smallest])
        for n in open_:
            out[n] += take
        left -= take * len(open_)
        open_ = [n for n in open_ if out[n] < wanted[n]]
    return out


# ----------------------------------------------------------------------------- the reader
class _Partitions:
    """What the driver knows of each partition: its options (the stream named) and, over the
    stream protocol, the held connection that finds its tail."""

    def __init__(self, opts: ReadOptions) -> None:
        self.names = discover(opts)
        first = dataclasses.replace(opts, stream=self.names[0], super_stream=None)
        chosen, client = choose_protocol(first)
        self.protocol = chosen.protocol
        self.opts: dict[str, ReadOptions] = {}
        self.probes: dict[str, TailProbe | None] = {}
        for name in self.names:
            popts = dataclasses.replace(chosen, stream=name, stream_members=())
            if name == self.names[0]:
                popts = chosen
            self.opts[name] = popts
            use = client if name == self.names[0] else None
            self.probes[name] = _probe(popts, use) if self.protocol == "stream" else None

    def _each(self, fn: Any, names: Sequence[str]) -> dict[str, Any]:
        """``fn(name)`` for each partition, side by side (a probe of an empty stream waits
        its whole probe time: one after another, they would add up)."""
        if len(names) <= 1:
            return {n: fn(n) for n in names}
        with ThreadPoolExecutor(len(names), thread_name_prefix="leveret-partition") as pool:
            return dict(zip(names, pool.map(fn, names), strict=True))

    def tails(self) -> dict[str, int]:
        return self._each(lambda n: stream_end(self.opts[n], self.probes[n]), self.names)

    def resolve(self, pos: Position) -> dict[str, int]:
        return self._each(lambda n: resolve(self.opts[n], pos, self.probes[n]), self.names)

    def close(self) -> None:
        for probe in self.probes.values():
            if probe is not None:
                probe.close()


def _plan(
    opts: ReadOptions, start: Mapping[str, int], end: Mapping[str, int], fresh: set[str]
) -> list[PartitionRange]:
    """Each partition's ``[start, end)`` cut into ranges, the cores shared among the
    partitions that have records."""
    active = [n for n in end if end[n] > start.get(n, 0)]
    if not active:
        return []
    per = max(1, math.ceil(opts.min_partitions / len(active)))
    out: list[PartitionRange] = []
    for n in active:
        for r in plan_ranges(start.get(n, 0), end[n], per, opts.max_records_per_partition):
            out.append(PartitionRange(n, r.start, r.end, n in fresh))
    return out


def _read_range(opts: ReadOptions, p: InputPartition) -> Iterator[pa.RecordBatch]:
    assert isinstance(p, PartitionRange)
    popts = dataclasses.replace(opts, stream=p.stream, super_stream=None, stream_members=())
    if p.fresh:
        popts = dataclasses.replace(popts, fail_on_data_loss=False)
    return _read(popts, RangePartition(p.start, p.end))


class SuperStreamStreamReader(OffsetsReader):
    """Structured Streaming from every partition of a super stream."""

    _held: _Partitions | None

    def __init__(self, opts: ReadOptions) -> None:
        _planner_logging()
        _planner_logging(log)
        self._held = _Partitions(opts)
        self.names = self._held.names
        # what executors need: the protocol chosen, no partition's members
        self.opts = dataclasses.replace(opts, protocol=self._held.protocol)
        self._target: dict[str, int] | None = None  # the tails fixed by availableNow
        self._gone: set[str] = set()

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_held"] = None  # the driver's connections stay on the driver
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)

    def _partitions(self) -> _Partitions:
        assert self._held is not None, "the partitions are the driver's"
        return self._held

    def _offsets(self, offset: Mapping[str, Any]) -> dict[str, int]:
        held = offset.get("superStream")
        if held != self.opts.super_stream or not isinstance(offset.get("partitions"), dict):
            kind = "super stream" if held is not None else "stream"
            raise AmqpSourceError(
                f"the checkpoint holds offsets of {kind} "
                f"{held if held is not None else offset.get('stream')!r}, not super stream "
                f"{self.opts.super_stream!r}; use a new checkpoint location for another one"
            )
        return {str(k): int(v) for k, v in offset["partitions"].items()}

    def _json(self, offsets: Mapping[str, int]) -> dict[str, Any]:
        # one order whatever the dict's: Spark compares offsets as their JSON text
        order = [n for n in self.names if n in offsets]
        order += sorted(n for n in offsets if n not in self.names)
        return {"superStream": self.opts.super_stream,
                "partitions": {n: offsets[n] for n in order}}  # fmt: skip

    def initialOffset(self) -> dict[str, Any]:
        return self._json(self._partitions().resolve(self.opts.starting))

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = self._partitions().tails()

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        begin = self._offsets(start)
        gone = sorted(set(begin) - set(self.names) - self._gone)
        if gone:
            self._gone.update(gone)
            log.warning("super stream %r: %s no longer bound to it, not read",
                        self.opts.super_stream, ", ".join(gone))  # fmt: skip
        tails = self._target if self._target is not None else self._partitions().tails()
        end = dict(begin)  # partitions no longer bound keep their offset
        for n in self.names:
            end[n] = max(begin.get(n, 0), tails.get(n, 0))
        if isinstance(limit, ReadMaxRows):
            wanted = {n: end[n] - begin.get(n, 0) for n in self.names}
            granted = share(wanted, limit.max_rows)
            for n in self.names:
                end[n] = begin.get(n, 0) + granted[n]
        for n in self.names:
            if n not in begin and end[n] == 0:
                # a new partition enters the offsets with its first batch: until then it is
                # new, and its first range is read as such (see PartitionRange.fresh)
                del end[n]
        return self._json(end)

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        begin, stop = self._offsets(start), self._offsets(end)
        return _plan(self.opts, begin, stop, set(stop) - set(begin))

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return _read_range(self.opts, partition)


class SuperStreamBatchReader(DataSourceReader):
    """A batch read of ``[startingOffsets, endingOffsets)`` of every partition."""

    def __init__(self, opts: ReadOptions) -> None:
        parts = _Partitions(opts)
        try:
            self.opts = dataclasses.replace(opts, protocol=parts.protocol)
            self.start = parts.resolve(opts.starting)
            self.end = parts.resolve(opts.ending)
        finally:
            parts.close()  # the reader is pickled: nothing of the driver's is kept

    def partitions(self) -> Sequence[InputPartition]:
        ranges = _plan(self.opts, self.start, self.end, set())
        if not ranges:  # an empty read still needs a task
            first = next(iter(self.start))
            return [PartitionRange(first, self.start[first], self.start[first])]
        return ranges

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return _read_range(self.opts, partition)


__all__ = ["PartitionRange", "SuperStreamBatchReader", "SuperStreamStreamReader", "discover",
           "share"]  # fmt: skip
