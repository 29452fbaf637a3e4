"""The Spark log pipeline: ingest throughput, emit->lake latency, and what each stage of the
ingest costs, per broker.

1. **read**: ``spark.read.format("amqp").option("records", "log")`` of a pre-filled stream,
   counted: the source alone (reading and parsing on the executors, to Spark).
2. **ingest**: the ingest query (``leveret.spark.pipeline.start_ingest``: log records
   parsed by the source, Parquet partitioned by date and severity) with ``availableNow``
   over the same stream, from an empty checkpoint, as one micro-batch. Two rates: from
   query start to termination (``wall``), and the batch's own (Spark's
   ``processedRowsPerSecond``: the planning of the query and its start-up left out).
   **warm ingest**: the same records in ``--warm-batches`` (4) equal batches of one query;
   the rate of the batches after the first (a running query's steady state: the query's
   start, its code generation and the JIT's first pass are paid by the first batch).
3. **write alone**: the ingest's Spark half without the broker: the same records, parsed
   and cached in Spark's memory, written as the partitioned Parquet lake.
4. **latency**: the ingest query with a 1 s trigger while a publisher emits records at a
   steady rate; a record's latency is from its publish to the moment the batch holding it is
   committed in the lake's ``_spark_metadata`` log (when readers of the lake can see it).
5. **profile** (``--profile``): each stage alone, in µs of CPU per record (see
   ``pipeline_stages.py``): the broker's stream delivery (its own CPU while a raw consumer
   reads), the executor's reader (frame walking, fields, JSON parsing, the batches), the
   Python-to-JVM hand-off, and the Parquet write; and the CPU of broker and Spark over a
   whole ingest.

Everything runs on one ``local[2]`` session (the JVM started once, excluded from the
numbers). Leveret is started here on free ports; RabbitMQ is used where reachable.

    python benchmarks/pipeline.py [--records N] [--rate R] [--seconds S] [--repeat K]
                                  [--brokers leveret,rabbitmq] [--profile] [--json out.json]

Each round measures every broker once; the order alternates between rounds and the report
gives each measure's median over the rounds (one round is not enough: the broker measured
second in a round profits from a JVM warmed by the first one's jobs).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))
# Spark's Python workers import the in-memory source of pipeline_stages
os.environ["PYTHONPATH"] = os.pathsep.join(
    p for p in (str(ROOT / "src"), str(ROOT / "benchmarks"), os.environ.get("PYTHONPATH")) if p
)

import pika  # noqa: E402
import pipeline_stages as stages  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402
from tests.support.brokers import (  # noqa: E402
    RABBITMQ_STREAM_PORT,
    BrokerUnderTest,
    ensure_rabbitmq,
    ensure_rabbitmq_stream,
    start_leveret,
)

from leveret.spark.client import Outgoing, publish  # noqa: E402
from leveret.spark.pipeline import LAKE_PARTITIONS, IngestConfig, start_ingest  # noqa: E402
from leveret.spark.session import spark_session  # noqa: E402


def _body(i: int, ts: float) -> bytes:
    iso = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(ts)) + f".{int(ts % 1 * 1e6):06d}Z"
    sev = ("info", "info", "warning", "error", "debug")[i % 5]
    return (
        f'{{"ts":"{iso}","severity":"{sev}","facility":"user","host":"bench",'
        f'"app":"app{i % 7}","pid":1,"message":"benchmark record {i}"}}'
    ).encode()


def _props(i: int) -> Any:
    return pika.BasicProperties(content_type="application/json", message_id=str(i))


def _declare(url: str, name: str) -> None:
    conn = pika.BlockingConnection(pika.URLParameters(url))
    conn.channel().queue_declare(name, durable=True, arguments={"x-queue-type": "stream"})
    conn.close()


def _delete(url: str, name: str) -> None:
    conn = pika.BlockingConnection(pika.URLParameters(url))
    conn.channel().queue_delete(name)
    conn.close()


def fill(url: str, stream: str, n: int) -> float:
    now = time.time()
    t = time.perf_counter()
    publish(url, (Outgoing("", stream, _body(i, now), _props(i)) for i in range(n)), window=5000)
    return n / (time.perf_counter() - t)


#: Failures of a loaded machine, not of the pipeline: Spark gives a Python process it
#: starts on the driver 10 seconds (fixed) to connect back. A measure that hits one is run
#: again, and the retry is counted in the results.
_TRANSIENT = ("Python worker failed to connect back",)
RETRIES: dict[str, int] = {}


def retrying(name: str, fn: Any, *args: Any, attempts: int = 3) -> Any:
    for attempt in range(attempts):
        try:
            return fn(*args)
        except Exception as exc:
            if attempt + 1 == attempts or not any(t in str(exc) for t in _TRANSIENT):
                raise
            RETRIES[name] = RETRIES.get(name, 0) + 1
            print(f"{name}: {exc.__class__.__name__} (Python worker start-up timed out); "
                  "again", file=sys.stderr, flush=True)  # fmt: skip
    raise AssertionError("unreachable")


#: How the executors read (``--protocols``): (option protocol, the broker's stream port).
PROTOCOL: dict[str, Any] = {"protocol": "amqp", "port": 5552}


def _records(spark: Any, url: str, stream: str) -> Any:
    return (
        spark.read.format("amqp")
        .option("url", url)
        .option("stream", stream)
        .option("records", "log")
        .option("protocol", PROTOCOL["protocol"])
        .option("streamPort", str(PROTOCOL["port"]))
        .load()
    )


def bench_read(spark: Any, url: str, stream: str, n: int) -> float:
    t = time.perf_counter()
    got = _records(spark, url, stream).count()
    assert got == n, (got, n)
    return n / (time.perf_counter() - t)


def bench_ingest(
    spark: Any, url: str, stream: str, n: int, tmp: Path, per_trigger: int | None = None
) -> dict[str, Any]:
    cfg = IngestConfig(url=url, lake=tmp / "lake", checkpoint=tmp / "cp", stream=stream,
                       trigger="availableNow", max_records_per_trigger=per_trigger or n,
                       protocol=PROTOCOL["protocol"], stream_port=PROTOCOL["port"])  # fmt: skip
    t = time.perf_counter()
    query = start_ingest(spark, cfg)
    query.awaitTermination()
    elapsed = time.perf_counter() - t
    got = spark.read.parquet(str(cfg.lake)).count()
    assert got == n, (got, n)
    batches = [p for p in query.recentProgress if p["numInputRows"]]
    batch_rate = (
        sum(p["numInputRows"] for p in batches)
        / sum(p["durationMs"]["triggerExecution"] / 1000 for p in batches)
        if batches
        else None
    )
    # warm: the batches after the first (the query's start, its code generation and the
    # JIT's first pass are paid by the first batch)
    later = batches[1:]
    warm_rate = (
        sum(p["numInputRows"] for p in later)
        / sum(p["durationMs"]["triggerExecution"] / 1000 for p in later)
        if later
        else None
    )
    return {"records_per_s": n / elapsed, "seconds": elapsed, "batch_per_s": batch_rate,
            "warm_per_s": warm_rate, "batches": len(batches)}  # fmt: skip


def bench_sink(spark: Any, url: str, stream: str, n: int, tmp: Path) -> float:
    df = _records(spark, url, stream).cache()
    assert df.count() == n
    try:
        t = time.perf_counter()
        df.write.partitionBy(*LAKE_PARTITIONS).parquet(str(tmp / "lake"))
        return n / (time.perf_counter() - t)
    finally:
        df.unpersist()


def bench_latency(
    spark: Any, url: str, stream: str, rate: int, seconds: float, tmp: Path
) -> dict[str, Any]:
    cfg = IngestConfig(url=url, lake=tmp / "lake", checkpoint=tmp / "cp", stream=stream,
                       trigger="1s", starting_offsets="latest",
                       protocol=PROTOCOL["protocol"], stream_port=PROTOCOL["port"])  # fmt: skip
    query = start_ingest(spark, cfg)
    meta = cfg.lake / "_spark_metadata"
    sent: dict[str, float] = {}
    stop = threading.Event()

    def emitter() -> None:
        def items() -> Any:
            i = 0
            start = time.time()
            while not stop.is_set():
                due = start + i / rate
                delay = due - time.time()
                if delay > 0:
                    time.sleep(delay)
                now = time.time()
                sent[str(i)] = now
                yield Outgoing("", stream, _body(i, now), _props(i))
                i += 1

        publish(url, items(), window=200)

    time.sleep(3)  # let the query start and find the tail first
    thread = threading.Thread(target=emitter, daemon=True)
    thread.start()
    seen: set[str] = set()  # data files already counted (N.compact files repeat them)
    latencies: list[float] = []
    deadline = time.time() + seconds
    while time.time() < deadline + 5:
        if time.time() >= deadline:
            stop.set()
        for entry in sorted(meta.glob("[0-9]*")) if meta.is_dir() else []:
            committed = time.time()
            for line in entry.read_text().splitlines()[1:]:
                path = json.loads(line)["path"].removeprefix("file:")
                if path in seen:
                    continue
                seen.add(path)
                ids = pq.read_table(path, columns=["message_id"]).column(0).to_pylist()
                latencies += [committed - sent[i] for i in ids if i in sent]
        time.sleep(0.02)
    query.stop()
    thread.join(5)
    latencies.sort()
    if not latencies:
        return {"records": 0}
    q = statistics.quantiles(latencies, n=100)
    return {"records": len(latencies), "rate": rate, "p50_s": q[49], "p95_s": q[94],
            "max_s": latencies[-1]}  # fmt: skip


#: Parquet write settings tried beside the session's own (``--profile``).
WRITE_VARIANTS = {
    "no_sort": {"spark.sql.maxConcurrentOutputFileWriters": "64"},
    "uncompressed": {"spark.sql.parquet.compression.codec": "uncompressed"},
    "no_dictionary": {"parquet.enable.dictionary": "false"},
}


def broker_pid(broker: BrokerUnderTest) -> int | None:
    """The broker's OS process: Leveret's server, RabbitMQ's Erlang VM (asked of the node)."""
    if broker.process is not None:
        return broker.process.pid
    ctl = shutil.which("rabbitmqctl") or "/usr/sbin/rabbitmqctl"
    try:
        out = subprocess.run([ctl, "eval", "os:getpid()."], capture_output=True, text=True,
                             timeout=60).stdout  # fmt: skip
        return int(out.strip().strip('"'))
    except (OSError, ValueError, subprocess.TimeoutExpired):
        return None


def delivery(broker: BrokerUnderTest, n: int) -> dict[str, Any]:
    """The broker delivering a stream over AMQP 0-9-1 alone (no Spark): ``n`` records with
    distinct message ids (see :func:`_props`) read from offset 0 by a raw consumer, in
    reads/s and the broker's CPU µs per record (RabbitMQ's too when its pid is known)."""
    stream = f"bench-{uuid.uuid4().hex[:8]}"
    _declare(broker.url, stream)
    try:
        fill(broker.url, stream, n)
        time.sleep(1)
        pid = broker_pid(broker)
        with stages.Meter(n, pid=pid, tree=False) as m:
            _chunks, seconds = stages.raw_read(broker.host, broker.port, stream, n)
        result = m.result if pid is not None else {}
        return {"broker": broker.name, "records": n, "raw_read_per_s": n / seconds,
                "broker_cpu_us": result.get("cpu_us")}  # fmt: skip
    finally:
        _delete(broker.url, stream)


def profile(broker: BrokerUnderTest, spark: Any, n: int) -> dict[str, Any]:
    """Each stage of the ingest alone, in µs per record (see pipeline_stages.py)."""
    from pyspark.sql.pandas.types import from_arrow_schema

    from leveret.spark.records import parse_log_records
    from leveret.spark.schema import LOG_SCHEMA, MESSAGE_SCHEMA

    url = broker.url
    pid = broker_pid(broker)
    out: dict[str, Any] = {"broker": broker.name, "records": n}
    stream = f"bench-{uuid.uuid4().hex[:8]}"
    _declare(url, stream)
    try:
        fill(url, stream, n)
        time.sleep(1)
        if pid is not None:
            with stages.Meter(n, pid=pid, tree=False) as m:
                chunks, seconds = stages.raw_read(broker.host, broker.port, stream, n)
            out["broker_delivery"] = {**m.result, "raw_read_per_s": n / seconds}
        else:
            chunks, seconds = stages.raw_read(broker.host, broker.port, stream, n)
            out["broker_delivery"] = {"raw_read_per_s": n / seconds}
        out["wire_bytes_per_record"] = sum(map(len, chunks)) / n
        out["reader"], records, messages = stages.reader_stages(chunks, n)
        del chunks
        sport = stream_port_of(broker)
        if sport:
            host = broker.host
            if pid is not None:
                with stages.Meter(n, pid=pid, tree=False) as m:
                    frames, seconds = stages.chunk_read(host, sport, stream, n)
                out["broker_chunk_delivery"] = {**m.result, "chunk_read_per_s": n / seconds}
            else:
                frames, seconds = stages.chunk_read(host, sport, stream, n)
                out["broker_chunk_delivery"] = {"chunk_read_per_s": n / seconds}
            out["chunk_bytes_per_record"] = sum(map(len, frames)) / n
            out["chunk_reader"], chunk_records = stages.chunk_stages(frames, n)
            del frames
            out["handoff_chunk_records"] = retrying(
                "handoff", stages.handoff, spark, chunk_records,
                from_arrow_schema(chunk_records[0].schema).json(), n,
            )  # fmt: skip
            del chunk_records
        records_json = from_arrow_schema(records[0].schema).json()
        messages_json = MESSAGE_SCHEMA.json()
        assert from_arrow_schema(records[0].schema) == LOG_SCHEMA
        out["handoff_records"] = retrying(
            "handoff", stages.handoff, spark, records, records_json, n
        )
        out["handoff_messages"] = retrying(
            "handoff", stages.handoff, spark, messages, messages_json, n
        )
        msgs, drop = stages.cached_arrow(spark, messages, messages_json)
        try:
            out["parse_mapinarrow"] = stages.spark_stage(
                spark, n, lambda: parse_log_records(msgs).write.format("noop")
                .mode("overwrite").save()
            )  # fmt: skip
        finally:
            drop()
        recs, drop = stages.cached_arrow(spark, records, records_json)
        try:
            out["parquet_write"] = stages.parquet_write(spark, recs, n)
            out["cached_scan"] = stages.spark_stage(
                spark, n, lambda: recs.write.format("noop").mode("overwrite").save()
            )
            for name, conf in WRITE_VARIANTS.items():
                out[f"parquet_write_{name}"] = stages.parquet_write(spark, recs, n, conf)
        finally:
            drop()
        del records, messages
        # a whole ingest: the CPU of Spark (driver, JVM, Python workers) and of the broker
        for proto in ["amqp", "stream"] if sport else ["amqp"]:
            PROTOCOL.update(protocol=proto, port=sport or 5552)
            suffix = "" if proto == "amqp" else "_stream"
            _whole_ingest(spark, url, stream, n, pid, out, suffix)
        PROTOCOL.update(protocol="amqp", port=5552)
        out["retries"] = dict(RETRIES)
        RETRIES.clear()
    finally:
        _delete(url, stream)
    return out


def stream_port_of(broker: BrokerUnderTest) -> int:
    """The broker's stream-protocol port, 0 when it has none."""
    if broker.stream_port:
        return broker.stream_port
    if broker.name == "rabbitmq" and ensure_rabbitmq_stream():
        return RABBITMQ_STREAM_PORT
    return 0


def _whole_ingest(
    spark: Any, url: str, stream: str, n: int, pid: int | None, out: dict[str, Any], suffix: str
) -> None:
    """One whole ingest, warmed up, with the CPU of Spark and of the broker."""
    retrying("ingest", _ingest_in_tmp, spark, url, stream, n)  # warm-up

    def measured() -> None:
        before = stages.cpu_by_kind(exclude=pid)
        with stages.Meter(n, exclude=pid) as spark_cpu:
            if pid is not None:
                with stages.Meter(n, pid=pid, tree=False) as broker_cpu:
                    out["ingest" + suffix] = _ingest_in_tmp(spark, url, stream, n)
                out["ingest_broker" + suffix] = broker_cpu.result
            else:
                out["ingest" + suffix] = _ingest_in_tmp(spark, url, stream, n)
        out["ingest_spark" + suffix] = spark_cpu.result
        after = stages.cpu_by_kind(exclude=pid)
        out["ingest_spark_by_process" + suffix] = {
            kind: 1e6 * (after[kind] - before.get(kind, 0.0)) / n for kind in after
        }

    retrying("ingest", measured)


def run(
    broker: BrokerUnderTest, spark: Any, args: argparse.Namespace, protocol: str = "amqp"
) -> dict[str, Any]:
    url = broker.url
    port = stream_port_of(broker) if protocol in ("stream", "auto") else 5552
    PROTOCOL.update(protocol=protocol, port=port or 5552)
    out: dict[str, Any] = {"broker": broker.name, "protocol": protocol}
    stream = f"bench-{uuid.uuid4().hex[:8]}"
    _declare(url, stream)
    try:
        out["publish_per_s"] = fill(url, stream, args.records)
        # warm up, unmeasured: the first jobs pay for Python workers, imports and the JVM's
        # JIT (measured: without this, whichever broker runs first ingests at half speed)
        retrying("read", bench_read, spark, url, stream, args.records)
        retrying("ingest", _ingest_in_tmp, spark, url, stream, args.records)
        out["read_per_s"] = retrying("read", bench_read, spark, url, stream, args.records)
        out["ingest"] = retrying("ingest", _ingest_in_tmp, spark, url, stream, args.records)
        # a running query's later batches: --warm-batches of equal size, the first left out
        per = -(-args.records // args.warm_batches)
        out["ingest_warm"] = retrying(
            "ingest", _ingest_in_tmp, spark, url, stream, args.records, per
        )
        retrying("sink", _sink_in_tmp, spark, url, stream, args.records)  # warm-up
        out["sink_alone_per_s"] = retrying("sink", _sink_in_tmp, spark, url, stream, args.records)
    finally:
        _delete(url, stream)
    if args.seconds > 0:
        stream = f"bench-{uuid.uuid4().hex[:8]}"
        _declare(url, stream)
        try:
            out["latency"] = retrying(
                "latency", _latency_in_tmp, spark, url, stream, args.rate, args.seconds
            )
        finally:
            _delete(url, stream)
    out["load_average"] = os.getloadavg()[0]
    out["retries"] = dict(RETRIES)
    RETRIES.clear()
    return out


def _ingest_in_tmp(
    spark: Any, url: str, stream: str, n: int, per_trigger: int | None = None
) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        return bench_ingest(spark, url, stream, n, Path(tmp), per_trigger)


def _sink_in_tmp(spark: Any, url: str, stream: str, n: int) -> float:
    with tempfile.TemporaryDirectory() as tmp:
        return bench_sink(spark, url, stream, n, Path(tmp))


def _latency_in_tmp(spark: Any, url: str, stream: str, rate: int, s: float) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        return bench_latency(spark, url, stream, rate, s, Path(tmp))


def _median(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Per-measure medians of a broker's repeated runs, and every run's value beside them."""

    def pick(r: dict[str, Any], key: str) -> float | None:
        if key == "ingest_per_s":
            return float(r["ingest"]["records_per_s"])
        if key == "ingest_batch_per_s":
            value = r["ingest"].get("batch_per_s")
            return None if value is None else float(value)
        if key == "ingest_warm_per_s":
            value = r.get("ingest_warm", {}).get("warm_per_s")
            return None if value is None else float(value)
        if key in ("latency_p50_s", "latency_p95_s"):
            value = r.get("latency", {}).get(key.removeprefix("latency_"))
            return None if value is None else float(value)
        return float(r[key])

    out: dict[str, Any] = {"broker": runs[0]["broker"], "protocol": runs[0]["protocol"],
                           "runs": len(runs)}  # fmt: skip
    for key in ("publish_per_s", "read_per_s", "ingest_per_s", "ingest_batch_per_s",
                "ingest_warm_per_s", "sink_alone_per_s", "latency_p50_s",
                "latency_p95_s"):  # fmt: skip
        values = [v for v in (pick(r, key) for r in runs) if v is not None]
        out[key] = statistics.median(values) if values else None
        out[key + "_all"] = [round(v, 3) for v in values]
        if len(values) > 1:  # the spread: lowest and highest round
            out[key + "_range"] = [round(min(values), 3), round(max(values), 3)]
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    # the warm ingest's batches are a quarter of these: at 75,000 a batch (300,000 records)
    # the ~0.24 s each batch costs Spark hid the running query's rate
    ap.add_argument("--records", type=int, default=1_200_000)
    ap.add_argument("--profile", action="store_true", help="profile each stage (once a broker)")
    ap.add_argument("--profile-records", type=int, default=200_000)
    ap.add_argument("--rate", type=int, default=1000, help="records/s during the latency run")
    ap.add_argument(
        "--seconds", type=float, default=20.0, help="length of the latency run (0: none)"
    )
    ap.add_argument("--brokers", default="leveret,rabbitmq")
    ap.add_argument(
        "--protocols",
        default="auto,amqp",
        help="how the executors read: auto (the default: the stream port when it answers), "
        "stream (port 5552), amqp (AMQP 0-9-1 consumers)",
    )
    ap.add_argument(
        "--repeat",
        type=int,
        default=3,
        help="rounds; the brokers' order alternates from round to round",
    )
    ap.add_argument(
        "--warm-batches",
        type=int,
        default=4,
        help="the warm ingest: the records in this many equal batches, the first not counted",
    )
    ap.add_argument(
        "--delivery",
        action="store_true",
        help="only the brokers' AMQP 0-9-1 stream delivery (--profile-records records, "
        "--repeat rounds), in broker CPU per record; no Spark",
    )
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    if args.delivery:
        delivery_only(args)
        return
    spark = spark_session(args.master, "leveret-bench")
    spark.sparkContext.setLogLevel("ERROR")
    spark.dataSource.register(stages.memory_source())
    brokers: dict[str, BrokerUnderTest] = {}
    leveret = None
    for name in args.brokers.split(","):
        if name == "leveret":
            leveret = brokers["leveret"] = start_leveret()
        elif name == "rabbitmq":
            rabbit = ensure_rabbitmq()
            if rabbit is None:
                print("RabbitMQ is not reachable: skipped", file=sys.stderr)
                continue
            brokers["rabbitmq"] = rabbit
    protocols = args.protocols.split(",")
    runs: dict[str, list[dict[str, Any]]] = {
        f"{name}/{p}": [] for name in brokers for p in protocols
        if p != "stream" or stream_port_of(brokers[name])
    }  # fmt: skip
    order = list(runs)
    profiles: list[dict[str, Any]] = []
    try:
        for round_ in range(args.repeat):
            # whichever broker goes second in a round gets a JVM warmed by more jobs (measured:
            # up to 40 % more ingest), so the order alternates and the medians are compared
            for key in order if round_ % 2 == 0 else order[::-1]:
                name, protocol = key.split("/")
                result = run(brokers[name], spark, args, protocol)
                result["round"] = round_ + 1
                runs[key].append(result)
                print(json.dumps(result), flush=True)
        if args.profile:
            for name in brokers:
                result = profile(brokers[name], spark, args.profile_records)
                profiles.append(result)
                print(json.dumps(result), flush=True)
            now = time.time()
            splice = stages.splice_estimate([_body(i, now) for i in range(100_000)])
            profiles.append({"broker_stream_path_estimate": splice})
            print(json.dumps(profiles[-1]), flush=True)
    finally:
        if leveret is not None:
            leveret.stop()
    medians = [_median(r) for r in runs.values() if r]
    for m in medians:
        print(json.dumps(m, indent=2), flush=True)
    summary = {"master": args.master, "cpus": os.cpu_count(), "records": args.records,
               "repeat": args.repeat, "medians": medians, "profiles": profiles,
               "runs": [r for rs in runs.values() for r in rs]}  # fmt: skip
    if args.json:
        args.json.write_text(json.dumps(summary, indent=2))
    spark.stop()


def delivery_only(args: argparse.Namespace) -> None:
    """``--delivery``: each broker's delivery, ``--repeat`` rounds, and the medians."""
    brokers: list[BrokerUnderTest] = []
    leveret = None
    try:
        for name in args.brokers.split(","):
            if name == "leveret":
                leveret = start_leveret(extra=["--log-level", "warning"])
                brokers.append(leveret)
            elif name == "rabbitmq":
                rabbit = ensure_rabbitmq()
                if rabbit is None:
                    print("RabbitMQ is not reachable: skipped", file=sys.stderr)
                else:
                    brokers.append(rabbit)
        rounds: dict[str, list[dict[str, Any]]] = {b.name: [] for b in brokers}
        for _ in range(args.repeat):
            for broker in brokers:
                result = delivery(broker, args.profile_records)
                rounds[broker.name].append(result)
                print(json.dumps(result), flush=True)
    finally:
        if leveret is not None:
            leveret.stop()
    for name, results in rounds.items():
        cpu = [r["broker_cpu_us"] for r in results if r["broker_cpu_us"] is not None]
        print(json.dumps({"broker": name, "median_raw_read_per_s": statistics.median(
            r["raw_read_per_s"] for r in results), "median_broker_cpu_us":
            statistics.median(cpu) if cpu else None}), flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
