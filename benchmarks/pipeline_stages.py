"""The ingest's stages one by one, in µs of CPU (and of wall time) per record.

Used by ``benchmarks/pipeline.py --profile``; each function measures one stage with the
others taken out of the way:

- **broker delivery**: a raw consumer reads the stream from offset 0 and only counts
  frames; the broker's CPU (from ``/proc/PID/stat``) over the read, per record. The raw
  bytes are kept for the reader stages.
- **reader**: the executor's Python over those bytes, from memory: walking the frames and
  building the Arrow batch Spark gets (messages for the generic reader, typed log records
  for the ingest's reader).
- **hand-off**: a Python data source that yields ready-made Arrow batches from memory to a
  ``noop`` write: Spark's Python worker to the JVM, and the JVM turning them into rows.
- **parse (JVM)**: the generic path's ``parse_log_records`` (Spark's ``from_json``) over
  message rows cached in Spark, to a ``noop`` write.
- **Parquet write**: the parsed records, cached in Spark, written as the lake (partitioned
  by date and severity).

CPU is summed over this process and its descendants (the driver's JVM and Spark's Python
workers) or, for the broker, over the broker's process; dividing by the records gives the
cost per record whatever the parallelism. Wall time per record is given beside it.
"""

from __future__ import annotations

import os
import socket
import struct
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

CLK_TCK = os.sysconf("SC_CLK_TCK")


# ----------------------------------------------------------------------------- CPU time
def process_cpu(pid: int, children: bool = True) -> float:
    """utime + stime (and the reaped children's) of a process, in seconds."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    ticks = int(fields[11]) + int(fields[12])
    if children:
        ticks += int(fields[13]) + int(fields[14])
    return ticks / CLK_TCK


def _parents() -> dict[int, int]:
    out: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    out[int(entry)] = int(f.read().rsplit(")", 1)[1].split()[1])
            except OSError:
                continue
    return out


def _tree(root: int, exclude: int | None = None) -> set[int]:
    """``root`` and its live descendants, without ``exclude`` and its own."""
    parents = _parents()
    tree = {root}
    grew = True
    while grew:
        grew = False
        for pid, ppid in parents.items():
            if ppid in tree and pid not in tree and pid != exclude:
                tree.add(pid)
                grew = True
    return tree


def tree_cpu(root: int, exclude: int | None = None) -> float:
    """CPU seconds of ``root`` and every live descendant (reaped ones count in their
    parent's children time), leaving out the process ``exclude`` (a broker this process
    started) and its descendants."""
    return sum(process_cpu(pid) for pid in _tree(root, exclude))


def cpu_by_kind(exclude: int | None = None) -> dict[str, float]:
    """CPU seconds of this process's tree by kind: ``driver`` (this Python), ``jvm``
    (Spark's JVM), ``python_workers`` (Spark's Python daemon, its workers and the driver's
    data-source planner processes), ``other``."""
    out = {"driver": 0.0, "jvm": 0.0, "python_workers": 0.0, "other": 0.0}
    me = os.getpid()
    for pid in _tree(me, exclude):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmd = f.read().split(b"\0")
        except OSError:
            continue
        if pid == me:
            kind = "driver"
        elif cmd and cmd[0].endswith(b"java"):
            kind = "jvm"
        elif any(b"pyspark" in c for c in cmd):
            kind = "python_workers"
        else:
            kind = "other"
        out[kind] += process_cpu(pid)
    return out


def machine_cpu() -> float:
    """CPU seconds spent not idle on the whole machine."""
    with open("/proc/stat") as f:
        values = [int(v) for v in f.readline().split()[1:]]
    idle = values[3] + values[4]
    return (sum(values[:8]) - idle) / CLK_TCK


class Meter:
    """Wall time, CPU of a process tree and of the whole machine over a ``with`` block."""

    def __init__(
        self, records: int, pid: int | None = None, tree: bool = True, exclude: int | None = None
    ) -> None:
        self.records = records
        self.pid = os.getpid() if pid is None else pid
        self.tree = tree
        self.exclude = exclude
        self.result: dict[str, float] = {}

    def _cpu(self) -> float:
        if self.tree:
            return tree_cpu(self.pid, self.exclude)
        return process_cpu(self.pid, children=False)

    def __enter__(self) -> Meter:
        self._t = time.perf_counter()
        self._cpu0 = self._cpu()
        self._m0 = machine_cpu()
        return self

    def __exit__(self, *exc: object) -> None:
        wall = time.perf_counter() - self._t
        cpu = self._cpu() - self._cpu0
        machine = machine_cpu() - self._m0
        n = self.records
        self.result = {
            "wall_us": 1e6 * wall / n,
            "cpu_us": 1e6 * cpu / n,
            "per_s": n / wall,
            # what everything else on the machine used meanwhile, in cores
            "others_cores": max(0.0, machine - cpu) / wall,
        }


# ----------------------------------------------------------------------------- broker
_HEAD = struct.Struct(">BHI")


def raw_read(
    host: str, port: int, stream: str, n: int, prefetch: int = 5000
) -> tuple[list[bytes], float]:
    """Read ``n`` deliveries of ``stream`` from offset 0 as raw bytes, doing nothing but
    count ``basic.deliver`` frames and ack; returns the bytes and the seconds it took."""
    from leveret.spark.wire import StreamConsumer

    consumer = StreamConsumer(host, port, "/", "guest", "guest", prefetch)
    chunks: list[bytes] = []
    try:
        consumer.consume(stream, 0)
        sock: socket.socket = consumer._sock
        sock.settimeout(30)
        buf = bytes(consumer._buf[consumer._start : consumer._end])  # came with consume-ok
        if buf:
            chunks.append(buf)
        t = time.perf_counter()
        count = acked = pos = 0
        while True:
            end = len(buf)
            while end - pos >= 7:
                ftype, _ch, size = _HEAD.unpack_from(buf, pos)
                if pos + 8 + size > end:
                    break
                if ftype == 1:
                    count += 1
                pos += 8 + size
            if count - acked >= prefetch // 2 or count >= n:
                consumer.ack(count)  # delivery tags count from 1 on the channel
                acked = count
            if count >= n:
                break
            try:
                data = sock.recv(1 << 20)
            except TimeoutError:
                raise TimeoutError(f"read {count} of {n} deliveries, acked {acked}") from None
            if not data:
                raise EOFError("the broker closed the connection")
            chunks.append(data)
            buf = buf[pos:] + data
            pos = 0
        return chunks, time.perf_counter() - t
    finally:
        consumer.close()


def chunk_read(host: str, port: int, stream: str, n: int) -> tuple[list[bytes], float]:
    """Read ``n`` records of ``stream`` from offset 0 over the stream protocol as whole
    Deliver frames (one osiris chunk each), doing nothing but count them and grant credit;
    returns the frames and the seconds it took."""
    from leveret.protocol.stream.spec import OffsetType
    from leveret.spark.chunkreader import CREDIT, CREDIT_BATCH
    from leveret.spark.streamclient import StreamClient, Target, chunk_bounds

    client = StreamClient(Target.of(f"amqp://guest:guest@{host}/", port))
    frames: list[bytes] = []
    try:
        t = time.perf_counter()
        client.subscribe(1, stream, OffsetType.OFFSET, 0, CREDIT)
        got = owed = 0
        while got < n:
            frame = client.chunk(1, 30)
            if frame is None:
                raise TimeoutError(f"read {got} of {n} records")
            frames.append(frame)
            got += chunk_bounds(frame)[2]
            owed += 1
            if owed >= CREDIT_BATCH:
                client.credit(1, owed)
                owed = 0
        return frames, time.perf_counter() - t
    finally:
        client.close()


def chunk_stages(frames: list[bytes], n: int) -> tuple[dict[str, Any], list[Any]]:
    """CPU µs per record of the stream-protocol reader's steps over captured frames: the
    chunk walk (CRC, entries, sections) and the typed log-record batches."""
    from leveret.spark.chunkreader import BATCH_ROWS
    from leveret.spark.chunks import Columns

    out: dict[str, Any] = {"chunks": len(frames)}

    def walk() -> list[Any]:
        done, cols = [], Columns(full=False)
        for f in frames:
            cols.add_chunk(f, 0, 1 << 62)
            if len(cols) >= BATCH_ROWS:
                done.append(cols)
                cols = Columns(full=False)
        return [*done, cols] if len(cols) else done

    walked, out["walk"] = time_cpu(walk, n)
    records, out["records"] = time_cpu(lambda: [c.records() for c in walked], n)
    return out, records


class ChunkSocket:
    """A socket stand-in that hands out captured chunks, then times out."""

    def __init__(self, chunks: list[bytes]) -> None:
        self._chunks = iter(chunks)

    def settimeout(self, _t: float | None) -> None:
        pass

    def recv(self, _n: int) -> bytes:
        try:
            return next(self._chunks)
        except StopIteration:
            raise TimeoutError from None

    def recv_into(self, buf: Any, nbytes: int = 0) -> int:
        data = self.recv(nbytes)
        buf[: len(data)] = data
        return len(data)


def time_cpu(fn: Callable[[], Any], records: int) -> tuple[Any, dict[str, float]]:
    """Run ``fn`` once in this process: its result and its CPU µs per record."""
    t, c = time.perf_counter(), time.process_time()
    out = fn()
    wall, cpu = time.perf_counter() - t, time.process_time() - c
    return out, {"cpu_us": 1e6 * cpu / records, "wall_us": 1e6 * wall / records}


# ----------------------------------------------------------------------------- Spark
def arrow_files(batches: list[Any], where: Path, parts: int = 2) -> list[str]:
    """Batches written as ``parts`` Arrow IPC files of near-equal size."""
    import pyarrow as pa

    table = pa.Table.from_batches(batches)
    step = -(-table.num_rows // parts)
    paths = []
    for i in range(parts):
        path = where / f"part-{i}.arrow"
        piece = table.slice(i * step, step)
        with pa.OSFile(str(path), "wb") as f, pa.ipc.new_file(f, table.schema) as w:
            for b in piece.to_batches(max_chunksize=10_000):
                w.write_batch(b)
        paths.append(str(path))
    return paths


def memory_source() -> type:
    """``format("bench-arrow")``: yields the batches of Arrow IPC files (option ``paths``,
    comma-separated; one partition per file) with the schema in option ``schema`` (JSON)."""
    from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

    class _Reader(DataSourceReader):
        def __init__(self, paths: list[str]) -> None:
            self.paths = paths

        def partitions(self) -> list[InputPartition]:
            return [InputPartition(p) for p in self.paths]

        def read(self, partition: InputPartition) -> Iterator[Any]:
            import pyarrow as pa

            with pa.memory_map(partition.value) as f:
                reader = pa.ipc.open_file(f)
                for i in range(reader.num_record_batches):
                    yield reader.get_batch(i)

    class BenchArrow(DataSource):
        @classmethod
        def name(cls) -> str:
            return "bench-arrow"

        def schema(self) -> Any:
            import json

            from pyspark.sql.types import StructType

            return StructType.fromJson(json.loads(self.options["schema"]))

        def reader(self, schema: Any) -> DataSourceReader:
            return _Reader(str(self.options["paths"]).split(","))

    return BenchArrow


def spark_stage(spark: Any, records: int, run: Callable[[], Any]) -> dict[str, float]:
    """Wall and CPU (driver, JVM, Python workers) per record of one Spark job, after one
    unmeasured run of the same job (the JIT, Python workers and imports warm up)."""
    run()
    with Meter(records) as m:
        run()
    return m.result


def handoff(spark: Any, batches: list[Any], schema_json: str, records: int) -> dict[str, float]:
    """Arrow batches from Python to the JVM and into rows: a ``noop`` write."""
    with tempfile.TemporaryDirectory() as tmp:
        paths = arrow_files(batches, Path(tmp))
        df = (
            spark.read.format("bench-arrow")
            .option("paths", ",".join(paths))
            .option("schema", schema_json)
            .load()
        )
        return spark_stage(spark, records, lambda: df.write.format("noop").mode("overwrite").save())


def cached_arrow(
    spark: Any, batches: list[Any], schema_json: str
) -> tuple[Any, Callable[[], None]]:
    """The batches as a DataFrame cached in Spark's memory (and a way to drop it)."""
    tmp = tempfile.TemporaryDirectory()
    paths = arrow_files(batches, Path(tmp.name))
    df = (
        spark.read.format("bench-arrow")
        .option("paths", ",".join(paths))
        .option("schema", schema_json)
        .load()
        .cache()
    )
    df.count()

    def drop() -> None:
        df.unpersist()
        tmp.cleanup()

    return df, drop


def parse_in_jvm(spark: Any, messages: Any, records: int) -> dict[str, float]:
    """The generic path's parsing: ``parse_log_records`` (Spark's from_json) to noop."""
    from leveret.spark.records import parse_log_records

    return spark_stage(
        spark,
        records,
        lambda: parse_log_records(messages).write.format("noop").mode("overwrite").save(),
    )


def parquet_write(
    spark: Any, records_df: Any, records: int, conf: dict[str, str] | None = None
) -> dict[str, float]:
    """Parsed records, cached, written as the lake: Parquet partitioned by date, severity
    (with the session settings ``conf`` for the while)."""
    out = tempfile.mkdtemp(prefix="bench-lake-")
    before = {k: spark.conf.get(k, None) for k in conf or {}}

    def run() -> None:
        records_df.write.mode("overwrite").partitionBy("date", "severity").parquet(out)

    try:
        for k, v in (conf or {}).items():
            spark.conf.set(k, v)
        return spark_stage(spark, records, run)
    finally:
        for k, v in before.items():
            if v is None:
                spark.conf.unset(k)
            else:
                spark.conf.set(k, v)
        import shutil

        shutil.rmtree(out, ignore_errors=True)


# ----------------------------------------------------------------------------- reader
def walk_blocks(chunks: list[bytes]) -> list[Any]:
    """The blocks of deliveries the executor's reader makes of the captured bytes."""
    from leveret.spark.wire import StreamConsumer

    consumer = StreamConsumer.__new__(StreamConsumer)
    consumer._sock = ChunkSocket(chunks)  # type: ignore[assignment]
    consumer._buf = bytearray(8 << 20)
    consumer._view = memoryview(consumer._buf)
    consumer._start = consumer._end = 0
    consumer._frame_max = 131072
    blocks = []
    while True:
        block = consumer.read(0)
        if block is None:
            return blocks
        blocks.append(block)


def reader_stages(chunks: list[bytes], n: int) -> tuple[dict[str, Any], list[Any], list[Any]]:
    """CPU µs per record of each step of the executor's reader over captured bytes:
    walking the frames, the fields and offsets, parsing the JSON bodies alone, the
    typed log-record batches (what the ingest hands Spark) and, for comparison, the
    message batches of the generic ``format("amqp")``."""
    import numpy as np

    from leveret.spark.frames import Fields
    from leveret.spark.logparse import Bodies, parse_json_blocks
    from leveret.spark.reader import message_batch, record_batch

    out: dict[str, Any] = {}
    blocks, out["walk"] = time_cpu(lambda: walk_blocks(chunks), n)
    out["blocks"] = len(blocks)
    got = sum(len(b) for b in blocks)
    assert got >= n, (got, n)

    def fields() -> list[Any]:
        res = []
        for b in blocks:
            f = Fields(b)
            res.append((f, f.offsets()))
        return res

    parsed, out["fields_offsets"] = time_cpu(fields, n)

    def json_only() -> None:
        for f, _off in parsed:
            data, offsets = f.bodies()
            parse_json_blocks(Bodies(data, offsets))

    _, out["json_parse"] = time_cpu(json_only, n)
    records, out["records"] = time_cpu(
        lambda: [record_batch(f, off, np.arange(f.n)) for f, off in parsed], n
    )
    messages, out["messages"] = time_cpu(
        lambda: [message_batch(f, off, np.arange(f.n)) for f, off in parsed], n
    )
    return out, records, messages


# ----------------------------------------------------------------------------- what would
def splice_estimate(bodies: list[bytes], repeat: int = 3) -> dict[str, float]:
    """CPU µs per record of a *hypothetical* broker stream path, in pure Python, for the
    broker-side change the README describes: records stored as Leveret's segment log stores
    them (24-byte head, exchange and key, properties, body), a whole chunk read at once, and
    each delivery spliced from the stored bytes: ``basic.deliver`` (a consumer-tag prefix
    cached per consumer, the delivery tag, the stored exchange and key), the content header
    (stored properties, ``x-stream-offset`` inserted into the headers table: ``splice``; or
    already stored with it at append time, when the offset is known: ``prespliced``) and
    the body, then one ``b"".join`` per chunk. Not the broker's code: a measure of what
    such a path would cost here."""
    import zlib

    rec = struct.Struct(">QqII")
    u32 = struct.Struct(">I")
    u64 = struct.Struct(">Q").pack
    head = struct.Struct(">BHI").pack
    content = struct.Struct(">HHQ").pack
    ek = b"\x04logs\x04info"
    ctype = b"application/json"
    entry = b"\x0fx-stream-offsetl"
    deliver = struct.pack(">HH", 60, 60) + b"\x1famq.ctag-ddrw88mPI0AqEG53tLf_gA"

    def props(i: int, offset: bool) -> bytes:
        mid = str(i).encode()
        flags = 0x8000 | 0x0080 | (0x2000 if offset else 0)
        table = u32.pack(25) + entry + u64(i) if offset else b""
        return struct.pack(">H", flags) + bytes([len(ctype)]) + ctype + table + bytes(
            [len(mid)]) + mid  # fmt: skip

    def chunk(offset: bool) -> bytes:
        parts = []
        for i, body in enumerate(bodies):
            p = props(i, offset)
            payload = ek + u32.pack(len(p)) + p + body
            parts.append(rec.pack(i, 0, len(payload), zlib.crc32(payload)) + payload)
        return b"".join(parts)

    def deliveries(data: bytes, splice: bool) -> bytes:
        out: list[bytes] = []
        add = out.append
        pos, end, tag = 0, len(data), 1
        unpack = rec.unpack_from
        while pos < end:
            offset, _ts, length, _crc = unpack(data, pos)
            p = pos + 24
            k = p + 2 + data[p] + data[p + 1 + data[p]]
            ps = k + 4
            bs = ps + u32.unpack_from(data, k)[0]
            be = p + length
            method = b"".join((deliver, u64(tag), b"\x00", data[p:k]))
            if splice:  # insert the headers table after content type (and encoding)
                flags = data[ps] << 8 | data[ps + 1]
                at = ps + 2 + (1 + data[ps + 2] if flags & 0x8000 else 0)
                if flags & 0x4000:
                    at += 1 + data[at]
                fl = flags | 0x2000
                prop = b"".join((bytes((fl >> 8, fl & 0xFF)), data[ps + 2 : at], u32.pack(25),
                                 entry, u64(offset), data[at:bs]))  # fmt: skip
            else:
                prop = data[ps:bs]
            size = be - bs
            add(b"".join((head(1, 1, len(method)), method, b"\xce",
                          head(2, 1, 12 + len(prop)), content(60, 0, size), prop, b"\xce",
                          head(3, 1, size), data[bs:be], b"\xce")))  # fmt: skip
            pos, tag = be, tag + 1
        return b"".join(out)

    n = len(bodies)
    out: dict[str, float] = {}
    for name, stored_with_offset in (("splice", False), ("prespliced", True)):
        data = chunk(stored_with_offset)
        _check_deliveries(deliveries(data, not stored_with_offset), bodies)
        splice = not stored_with_offset
        runs = [
            time_cpu(lambda d=data, s=splice: deliveries(d, s), n)[1]["cpu_us"]  # type: ignore[misc]
            for _ in range(repeat)
        ]
        out[name] = min(runs)
    return out


def _check_deliveries(wire: bytes, bodies: list[bytes]) -> None:
    """The spliced frames are deliveries the executor's reader takes apart correctly."""
    import numpy as np

    from leveret.spark.frames import Fields
    from leveret.spark.wire import Deliveries, walk

    pos, starts, parts, multi = walk(memoryview(wire), 0, len(wire), len(bodies) + 1, 131064)
    assert pos == len(wire) and not multi
    block = Deliveries(wire, np.array(starts, np.int64), b"\n".join([*map(bytes, parts), b""]))
    fields = Fields(block)
    assert list(fields.offsets()) == list(range(len(bodies)))
    assert [bytes(p) for p in parts] == bodies
