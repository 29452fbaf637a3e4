"""The Spark log pipeline: ingest throughput and emit->lake latency, per broker.

1. **read**: ``spark.read.format("amqp")`` of a pre-filled stream, counted (the source alone).
2. **ingest**: the ingest query (``leveret.spark.pipeline.start_ingest``: parse records,
   Parquet partitioned by date and severity) with ``availableNow`` over the same stream,
   from an empty checkpoint: records/s from query start to termination.
3. **sink alone**: the ingest's Spark half without the broker: the same records, read once
   and cached in Spark's memory, parsed and written as the partitioned Parquet lake (a batch
   write): how fast the JVM side goes on this machine.
4. **latency**: the ingest query with a 1 s trigger while a publisher emits records at a
   steady rate; a record's latency is from its publish to the moment the batch holding it is
   committed in the lake's ``_spark_metadata`` log (when readers of the lake can see it).

Everything runs on one ``local[2]`` session (the JVM started once, excluded from the
numbers). Leveret is started here on free ports; RabbitMQ is used where reachable.

    python benchmarks/pipeline.py [--records N] [--rate R] [--seconds S] [--repeat K]
                                  [--brokers leveret,rabbitmq] [--json out.json]

Each round measures every broker once; the order alternates between rounds and the report
gives each measure's median over the rounds (one round is not enough: the broker measured
second in a round profits from a JVM warmed by the first one's jobs).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import pika  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402
from tests.brokers import BrokerUnderTest, ensure_rabbitmq, start_leveret  # noqa: E402

from leveret.spark.client import Outgoing, publish  # noqa: E402
from leveret.spark.pipeline import LAKE_PARTITIONS, IngestConfig, start_ingest  # noqa: E402
from leveret.spark.records import parse_log_records  # noqa: E402
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


def bench_read(spark: Any, url: str, stream: str, n: int) -> float:
    t = time.perf_counter()
    got = spark.read.format("amqp").option("url", url).option("stream", stream).load().count()
    assert got == n, (got, n)
    return n / (time.perf_counter() - t)


def bench_ingest(spark: Any, url: str, stream: str, n: int, tmp: Path) -> dict[str, Any]:
    cfg = IngestConfig(url=url, lake=tmp / "lake", checkpoint=tmp / "cp", stream=stream,
                       trigger="availableNow", max_records_per_trigger=n)  # fmt: skip
    t = time.perf_counter()
    query = start_ingest(spark, cfg)
    query.awaitTermination()
    elapsed = time.perf_counter() - t
    got = spark.read.parquet(str(cfg.lake)).count()
    assert got == n, (got, n)
    return {"records_per_s": n / elapsed, "seconds": elapsed,
            "batches": len(query.recentProgress)}  # fmt: skip


def bench_sink(spark: Any, url: str, stream: str, n: int, tmp: Path) -> float:
    df = spark.read.format("amqp").option("url", url).option("stream", stream).load().cache()
    assert df.count() == n
    try:
        t = time.perf_counter()
        parse_log_records(df).write.partitionBy(*LAKE_PARTITIONS).parquet(str(tmp / "lake"))
        return n / (time.perf_counter() - t)
    finally:
        df.unpersist()


def bench_latency(
    spark: Any, url: str, stream: str, rate: int, seconds: float, tmp: Path
) -> dict[str, Any]:
    cfg = IngestConfig(url=url, lake=tmp / "lake", checkpoint=tmp / "cp", stream=stream,
                       trigger="1s", starting_offsets="latest")  # fmt: skip
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


def run(broker: BrokerUnderTest, spark: Any, args: argparse.Namespace) -> dict[str, Any]:
    url = broker.url
    out: dict[str, Any] = {"broker": broker.name}
    stream = f"bench-{uuid.uuid4().hex[:8]}"
    _declare(url, stream)
    try:
        out["publish_per_s"] = fill(url, stream, args.records)
        # warm up, unmeasured: the first jobs pay for Python workers, imports and the JVM's
        # JIT (measured: without this, whichever broker runs first ingests at half speed)
        bench_read(spark, url, stream, args.records)
        with tempfile.TemporaryDirectory() as tmp:
            bench_ingest(spark, url, stream, args.records, Path(tmp))
        out["read_per_s"] = bench_read(spark, url, stream, args.records)
        with tempfile.TemporaryDirectory() as tmp:
            out["ingest"] = bench_ingest(spark, url, stream, args.records, Path(tmp))
        with tempfile.TemporaryDirectory() as tmp:
            bench_sink(spark, url, stream, args.records, Path(tmp))  # warm-up
        with tempfile.TemporaryDirectory() as tmp:
            out["sink_alone_per_s"] = bench_sink(spark, url, stream, args.records, Path(tmp))
    finally:
        _delete(url, stream)
    stream = f"bench-{uuid.uuid4().hex[:8]}"
    _declare(url, stream)
    try:
        with tempfile.TemporaryDirectory() as tmp:
            out["latency"] = bench_latency(spark, url, stream, args.rate, args.seconds, Path(tmp))
    finally:
        _delete(url, stream)
    return out


def _median(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Per-measure medians of a broker's repeated runs, and every run's value beside them."""

    def pick(r: dict[str, Any], key: str) -> float | None:
        if key == "ingest_per_s":
            return float(r["ingest"]["records_per_s"])
        if key in ("latency_p50_s", "latency_p95_s"):
            value = r["latency"].get(key.removeprefix("latency_"))
            return None if value is None else float(value)
        return float(r[key])

    out: dict[str, Any] = {"broker": runs[0]["broker"], "runs": len(runs)}
    for key in ("publish_per_s", "read_per_s", "ingest_per_s", "sink_alone_per_s",
                "latency_p50_s", "latency_p95_s"):  # fmt: skip
        values = [v for v in (pick(r, key) for r in runs) if v is not None]
        out[key] = statistics.median(values) if values else None
        out[key + "_all"] = [round(v, 3) for v in values]
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=100_000)
    ap.add_argument("--rate", type=int, default=1000, help="records/s during the latency run")
    ap.add_argument("--seconds", type=float, default=20.0, help="length of the latency run")
    ap.add_argument("--brokers", default="leveret,rabbitmq")
    ap.add_argument(
        "--repeat",
        type=int,
        default=3,
        help="rounds; the brokers' order alternates from round to round",
    )
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    spark = spark_session(args.master, "leveret-bench")
    spark.sparkContext.setLogLevel("ERROR")
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
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in brokers}
    order = list(brokers)
    try:
        for round_ in range(args.repeat):
            # whichever broker goes second in a round gets a JVM warmed by more jobs (measured:
            # up to 40 % more ingest), so the order alternates and the medians are compared
            for name in order if round_ % 2 == 0 else order[::-1]:
                result = run(brokers[name], spark, args)
                result["round"] = round_ + 1
                runs[name].append(result)
                print(json.dumps(result), flush=True)
    finally:
        if leveret is not None:
            leveret.stop()
    medians = [_median(r) for r in runs.values() if r]
    for m in medians:
        print(json.dumps(m, indent=2), flush=True)
    summary = {"master": args.master, "cpus": os.cpu_count(), "records": args.records,
               "repeat": args.repeat, "medians": medians,
               "runs": [r for rs in runs.values() for r in rs]}  # fmt: skip
    if args.json:
        args.json.write_text(json.dumps(summary, indent=2))
    spark.stop()


if __name__ == "__main__":
    main()
