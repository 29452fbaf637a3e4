"""Delayed messages (``x-delayed-message``): how late they arrive, and what a million
scheduled cost in memory.

- lateness: one producer process schedules ``--rate`` (10,000) messages per second for
  ``--seconds`` on a durable x-delayed-message exchange of a ``leveret server`` with a data
  directory, each with an ``x-delay`` drawn uniformly from ``--min-delay``..``--max-delay``
  ms and its due time (publish time + delay, wall clock, µs) in its body; a consumer
  process (no-ack) records, per message, when it arrived minus when it was due. The same
  is measured for messages with no delay (published and received at once), to show what
  the path from the broker to the consumer costs by itself. Reported: p50, p99, p99.9, max,
  per run, and the median and range of p99 over ``--repeat`` runs.
- memory: ``--million`` messages (1,000,000) scheduled an hour or two ahead, as fast as one
  producer goes; the broker's resident memory before, after 10 % and after all of them,
  and the schedule's size on disk.

RabbitMQ 3.10.8 does not ship rabbitmq-delayed-message-exchange (a community plugin), so
there is no RabbitMQ figure to compare with here.

    python benchmarks/delayed.py [--seconds 20] [--rate 10000] [--repeat 3] [--million 1000000]
"""

from __future__ import annotations

import argparse
import gc
import json
import multiprocessing as mp
import os
import random
import statistics
import struct
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import pika  # noqa: E402
from tests.support.brokers import start_leveret  # noqa: E402

EXCHANGE = "bench-delayed"
QUEUE = "bench-delayed-q"
_DUE = struct.Struct(">q")


def rss(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def setup(url: str, max_length: int | None = None) -> None:
    conn = pika.BlockingConnection(pika.URLParameters(url))
    ch = conn.channel()
    ch.exchange_declare(
        EXCHANGE, "x-delayed-message", durable=True, arguments={"x-delayed-type": "direct"}
    )
    args = {"x-max-length": max_length} if max_length else None
    ch.queue_delete(QUEUE)
    ch.queue_declare(QUEUE, durable=True, arguments=args)
    ch.queue_bind(QUEUE, EXCHANGE, "k")
    ch.queue_purge(QUEUE)
    conn.close()


def produce(url: str, rate: int, seconds: float, lo: int, hi: int, delayed: bool) -> None:
    conn = pika.BlockingConnection(pika.URLParameters(url))
    ch = conn.channel()
    rng = random.Random(1)
    tick = 0.01
    per_tick = max(1, int(rate * tick))
    start = time.monotonic()
    n = 0
    while time.monotonic() - start < seconds:
        for _ in range(per_tick):
            delay = rng.randint(lo, hi) if delayed else 0
            due = int(time.time() * 1_000_000) + delay * 1000
            headers = {"x-delay": delay} if delayed else None
            ch.basic_publish(EXCHANGE, "k", _DUE.pack(due), pika.BasicProperties(headers=headers))
            n += 1
        ahead = start + n / rate - time.monotonic()
        if ahead > 0:
            time.sleep(ahead)
        conn.process_data_events(0)
    conn.close()


def consume(url: str, expected: int, timeout: float, out: Any) -> None:
    conn = pika.BlockingConnection(pika.URLParameters(url))
    ch = conn.channel()
    late: list[int] = []

    def on_message(_ch: Any, _m: Any, _p: Any, body: bytes) -> None:
        late.append(int(time.time() * 1_000_000) - _DUE.unpack(body)[0])

    ch.basic_consume(QUEUE, on_message, auto_ack=True)
    deadline = time.monotonic() + timeout
    while len(late) < expected and time.monotonic() < deadline:
        conn.process_data_events(0.1)
    conn.close()
    out.put(late)


def percentile(values: list[int], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(p / 100 * len(ordered)))] / 1000  # ms


def lateness_run(url: str, args: argparse.Namespace, delayed: bool) -> dict[str, Any]:
    setup(url)
    expected = int(args.rate * args.seconds)
    q: mp.Queue[list[int]] = mp.Queue()
    consumer = mp.Process(
        target=consume, args=(url, expected, args.seconds + args.max_delay / 1000 + 30, q)
    )
    consumer.start()
    time.sleep(0.5)
    producer = mp.Process(
        target=produce,
        args=(url, args.rate, args.seconds, args.min_delay, args.max_delay, delayed),
    )
    producer.start()
    producer.join()
    late = q.get()
    consumer.join()
    return {
        "delayed": delayed,
        "received": len(late),
        "expected": expected,
        "p50_ms": percentile(late, 50),
        "p99_ms": percentile(late, 99),
        "p999_ms": percentile(late, 99.9),
        "max_ms": max(late) / 1000,
        "min_ms": min(late) / 1000,
    }


def in_process_run(args: argparse.Namespace) -> dict[str, Any]:
    """The schedule alone: an in-process broker with a data directory, messages scheduled
    through its core on its own loop at ``--rate`` (no sockets, no client), lateness
    measured where a message leaves the schedule."""
    import leveret
    from leveret.broker.message import Message
    from leveret.protocol import table

    data_dir = Path(tempfile.mkdtemp(prefix="bench-delayed-inproc-"))
    with leveret.Broker(data_dir=data_dir) as b:
        server = b._started()
        scheduler = server.scheduler
        # no consumer here: a queue bounded at 10,000 stands in for one that keeps up (an
        # unbounded one held every delivered message, 200,000 objects the collector scans
        # in each full collection: 65-120 ms pauses that were the p99, measured)
        setup(b.url, max_length=None if args.backlog else 10_000)
        gc.freeze()  # as leveret server does once it has started
        late: list[int] = []
        scheduler.lateness = late
        rng = random.Random(3)
        per_tick = max(1, int(args.rate * 0.01))
        n_total = int(args.rate * args.seconds)

        def publish_batch(core: Any) -> None:
            vhost = core.vhosts["/"]
            x = vhost.exchanges[EXCHANGE]
            for _ in range(per_tick):
                delay = rng.randint(args.min_delay, args.max_delay)
                props = b"\x20\x00" + table.encode_table(
                    [("x-delay", b"I" + struct.pack(">i", delay))]
                )
                vhost.publish_to(x, Message.from_parts(EXCHANGE, "k", props, b"x" * 100), False)

        start = time.monotonic()
        sent = 0
        while sent < n_total:
            b._call(publish_batch)
            sent += per_tick
            ahead = start + sent / args.rate - time.monotonic()
            if ahead > 0:
                time.sleep(ahead)
        produced_s = time.monotonic() - start
        deadline = time.monotonic() + args.max_delay / 1000 + 30
        while len(late) < sent and time.monotonic() < deadline:
            time.sleep(0.2)
        scheduler.lateness = None
    return {
        "mode": "in-process",
        "scheduled": sent,
        "delivered": len(late),
        "rate_achieved": round(sent / produced_s),
        "p50_ms": float(statistics.median(late)),
        "p99_ms": float(sorted(late)[int(0.99 * (len(late) - 1))]),
        "p999_ms": float(sorted(late)[int(0.999 * (len(late) - 1))]),
        "max_ms": float(max(late)),
    }


def schedule_many(url: str, count: int, pid: int) -> dict[str, Any]:
    conn = pika.BlockingConnection(pika.URLParameters(url))
    ch = conn.channel()
    rng = random.Random(2)
    before = rss(pid)
    marks = {}
    start = time.monotonic()
    for i in range(count):
        props = pika.BasicProperties(headers={"x-delay": rng.randint(3_600_000, 7_200_000)})
        ch.basic_publish(EXCHANGE, "k", b"x" * 100, props)
        if i + 1 in (count // 10, count):
            ch.queue_declare(QUEUE, passive=True)  # a round trip: the broker has them all
            time.sleep(1)
            marks[i + 1] = rss(pid)
    elapsed = time.monotonic() - start
    conn.close()
    return {"count": count, "rss_before": before, "rss_at": marks, "seconds": elapsed}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=20)
    parser.add_argument("--rate", type=int, default=10_000)
    parser.add_argument("--min-delay", type=int, default=1000)
    parser.add_argument("--max-delay", type=int, default=5000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--million", type=int, default=1_000_000)
    parser.add_argument("--json", type=Path)
    parser.add_argument(
        "--in-process", action="store_true", help="only the schedule itself, in-process"
    )
    parser.add_argument(
        "--backlog",
        action="store_true",
        help="in-process: keep every delivered message in the queue (no stand-in consumer)",
    )
    args = parser.parse_args()
    if args.in_process:
        runs = []
        for _ in range(args.repeat):
            run = in_process_run(args)
            runs.append(run)
            print("in-process:", json.dumps(run), flush=True)
        p99s = [r["p99_ms"] for r in runs]
        out = {"load": os.getloadavg(), "runs": runs, "p99_median_ms": statistics.median(p99s)}
        print(json.dumps(out, indent=2))
        if args.json:
            args.json.write_text(json.dumps(out, indent=2))
        return
    data_dir = Path(tempfile.mkdtemp(prefix="bench-delayed-"))
    broker = start_leveret(data_dir)
    assert broker.process is not None
    pid = broker.process.pid
    results: dict[str, Any] = {"load_before": os.getloadavg(), "runs": []}
    try:
        results["baseline"] = lateness_run(broker.url, args, delayed=False)
        print("no delay:", json.dumps(results["baseline"]), flush=True)
        for _ in range(args.repeat):
            run = lateness_run(broker.url, args, delayed=True)
            results["runs"].append(run)
            print("delayed:", json.dumps(run), flush=True)
        p99s = [r["p99_ms"] for r in results["runs"]]
        results["p99_median_ms"] = statistics.median(p99s)
        results["p99_range_ms"] = [min(p99s), max(p99s)]
        if args.million:
            mem = schedule_many(broker.url, args.million, pid)
            size = sum(p.stat().st_size for p in data_dir.rglob("*.dl"))
            mem["schedule_files"] = sum(1 for _ in data_dir.rglob("*.dl"))
            mem["schedule_bytes_on_disk"] = size
            results["memory"] = mem
            print("memory:", json.dumps(mem), flush=True)
        results["load_after"] = os.getloadavg()
    finally:
        broker.stop()
    print(json.dumps(results, indent=2))
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
