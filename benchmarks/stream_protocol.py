"""RabbitMQ's stream protocol through the unmodified rstream client, Leveret against
RabbitMQ 3.10.8 in the same run: the publish rate with confirms, the rate a subscription
from the first offset reads the stream at, and each broker's CPU per record (``/proc``),
as medians and spread over rounds that alternate between the brokers.

    python benchmarks/stream_protocol.py [--records N] [--repeat K] [--rabbitmq own|shared]
                                         [--json out.json]

Leveret runs as ``leveret server`` on free ports with a temporary data dir. RabbitMQ is, by
default, a node of its own (``tests/support/rabbitmq_cluster``: its own name, ports and data,
the stream plugin enabled on it only; needs root and Debian's rabbitmq-server), so that its
CPU figure is the benchmark's alone; ``--rabbitmq shared`` uses the node on 127.0.0.1:5552
instead. Bodies are 200-byte JSON-like log lines, published 1,000 per ``send_batch``.
rstream reads with its defaults: 10 credits, one back per chunk, bodies as raw bytes.

Broker CPU comes from ``/proc/<pid>/stat`` (10 ms ticks: ±0.1 µs per record at 100,000
records). The read rate is that of one Python client: past some point it measures rstream
more than the broker, which is why the broker's CPU per delivered record is reported too."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from rstream import (  # noqa: E402
    ConfirmationStatus,
    Consumer,
    ConsumerOffsetSpecification,
    MessageContext,
    OffsetType,
    Producer,
)
from tests.support.brokers import (  # noqa: E402
    RABBITMQ_STREAM_PORT,
    ensure_rabbitmq_stream,
    start_leveret,
)
from tests.support.ports import free_port  # noqa: E402

from leveret.protocol.stream.spec import OffsetType as StreamOffset  # noqa: E402
from leveret.spark.chunkreader import CREDIT, CREDIT_BATCH  # noqa: E402
from leveret.spark.streamclient import StreamClient, Target, chunk_bounds  # noqa: E402

KW: dict[str, Any] = {"username": "guest", "password": "guest", "load_balancer_mode": True}
BODY = b'{"ts":"2026-11-26T07:00:00Z","level":"info","msg":"' + b"x" * 150 + b'"}'
#: How many times the chunk reader reads each stream: one pass of 500,000 records takes
#: 60-150 ms, too short to time on its own.
CHUNK_PASSES = 10
KEYS = (
    "publish_per_s",
    "publish_broker_us",
    "read_per_s",
    "read_broker_us",
    "chunks_per_s",
    "chunks_broker_us",
)


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def one_run(port: int, pid: int, records: int) -> dict[str, float]:
    stream = f"bench-{uuid.uuid4().hex[:8]}"
    async with Producer("127.0.0.1", port, **KW) as p:
        await p.create_stream(stream)
        confirmed = 0
        done = asyncio.Event()

        async def on_confirm(_status: ConfirmationStatus) -> None:
            nonlocal confirmed
            confirmed += 1
            if confirmed == records:
                done.set()

        t0, c0 = time.perf_counter(), cpu_seconds(pid)
        for _ in range(0, records, 1000):
            await p.send_batch(stream, [BODY] * 1000, on_publish_confirm=on_confirm)
        await done.wait()
        publish_s, publish_cpu = time.perf_counter() - t0, cpu_seconds(pid) - c0
    got = 0
    finished = asyncio.Event()

    async def on_message(_msg: bytes, _ctx: MessageContext) -> None:
        nonlocal got
        got += 1
        if got == records:
            finished.set()

    c = Consumer("127.0.0.1", port, **KW)
    await c.start()
    t0, c0 = time.perf_counter(), cpu_seconds(pid)
    await c.subscribe(
        stream, on_message, offset_specification=ConsumerOffsetSpecification(OffsetType.FIRST)
    )
    await finished.wait()
    read_s, read_cpu = time.perf_counter() - t0, cpu_seconds(pid) - c0
    await c.close()
    chunks_s, chunks_cpu = chunk_read(port, pid, stream, records)
    async with Producer("127.0.0.1", port, **KW) as p:
        await p.delete_stream(stream)
    return {
        "publish_per_s": records / publish_s,
        "publish_broker_us": publish_cpu / records * 1e6,
        "read_per_s": records / read_s,
        "read_broker_us": read_cpu / records * 1e6,
        "chunks_per_s": records / chunks_s,
        "chunks_broker_us": chunks_cpu / records * 1e6,
    }


def chunk_read(
    port: int, pid: int, stream: str, records: int, passes: int = CHUNK_PASSES
) -> tuple[float, float]:
    """Read the stream from its first offset as whole chunks, with the blocking client
    Spark's executors use (256 credits, 64 given back at a time), doing nothing per record:
    the rate the broker delivers at when the reader is not the bound. The stream is read
    ``passes`` times, one subscription after another, so that the measure lasts long
    enough to time. Seconds and broker CPU-seconds per pass."""
    client = StreamClient(Target.of("amqp://guest:guest@127.0.0.1/", port))
    try:
        t0, c0 = time.perf_counter(), cpu_seconds(pid)
        for sub in range(1, passes + 1):
            client.subscribe(sub, stream, StreamOffset.OFFSET, 0, CREDIT)
            got = owed = 0
            while got < records:
                frame = client.chunk(sub, 30)
                if frame is None:
                    raise TimeoutError(f"read {got} of {records} records")
                got += chunk_bounds(frame)[2]
                owed += 1
                if owed >= CREDIT_BATCH:
                    client.credit(sub, owed)
                    owed = 0
            client.unsubscribe(sub)
        return (time.perf_counter() - t0) / passes, (cpu_seconds(pid) - c0) / passes
    finally:
        client.close()


def shared_rabbitmq_pid() -> int | None:
    out = subprocess.run(["ss", "-ltnpH"], capture_output=True, text=True).stdout
    for line in out.splitlines():
        if f":{RABBITMQ_STREAM_PORT} " in line and "pid=" in line:
            return int(line.split("pid=")[1].split(",")[0])
    return None


def spread(values: list[float]) -> str:
    return f"{min(values):,.2f}-{max(values):,.2f}" if values else "-"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=100_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--rabbitmq", choices=("own", "shared", "none"), default="own")
    ap.add_argument(
        "--baseline-src",
        type=Path,
        help="also run the Leveret whose src/ directory this is (e.g. an older commit's, from"
        " git archive), as 'baseline', in the same rounds",
    )
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    targets: dict[str, tuple[int, int]] = {}
    cluster: Any = None
    leveret = start_leveret(extra=["--log-level", "warning"])
    assert leveret.process is not None
    targets["leveret"] = (leveret.stream_port, leveret.process.pid)
    baseline = None
    try:
        if args.baseline_src is not None:
            baseline = start_leveret(
                extra=["--log-level", "warning"],
                env={"PYTHONPATH": f"{args.baseline_src.resolve()}:{ROOT}"},
            )
            assert baseline.process is not None
            targets["baseline"] = (baseline.stream_port, baseline.process.pid)
        if args.rabbitmq == "own":
            from tests.support.rabbitmq_cluster import RabbitCluster

            port = free_port()
            cluster = RabbitCluster(
                Path(tempfile.mkdtemp(prefix="leveret-stream-bench-")),
                size=1,
                plugins=("rabbitmq_stream",),
                conf=(f"stream.listeners.tcp.default = {port}",),
            )
            cluster.start()
            pid = cluster.nodes[0].pid
            assert pid is not None
            targets["rabbitmq"] = (port, pid)
        elif args.rabbitmq == "shared":
            shared = shared_rabbitmq_pid() if ensure_rabbitmq_stream() else None
            if shared is not None:
                targets["rabbitmq"] = (RABBITMQ_STREAM_PORT, shared)
            else:
                print("RabbitMQ's stream protocol is not reachable on 5552: Leveret alone")
        results: dict[str, list[dict[str, float]]] = {name: [] for name in targets}
        loads = [os.getloadavg()[0]]
        for _ in range(args.repeat):
            for name, (bport, bpid) in targets.items():  # interleaved: the same load on both
                run = asyncio.run(one_run(bport, bpid, args.records))
                results[name].append(run)
                print(name, json.dumps({k: round(v, 2) for k, v in run.items()}), flush=True)
            loads.append(os.getloadavg()[0])
    finally:
        leveret.stop()
        if baseline is not None:
            baseline.stop()
        if cluster is not None:
            cluster.stop()
    summary: dict[str, dict[str, Any]] = {}
    for name, runs in results.items():
        summary[name] = {k: statistics.median(r[k] for r in runs) for k in KEYS}
        summary[name]["spread"] = {
            k: [min(r[k] for r in runs), max(r[k] for r in runs)] for k in KEYS
        }
    print(
        f"{args.records:,} records of {len(BODY)} bytes, median (min-max) of {args.repeat} rounds,"
        f" load average {min(loads):.1f}-{max(loads):.1f}:"
    )
    for name, s in summary.items():
        runs = results[name]
        print(
            f"  {name:8} publish {s['publish_per_s']:>9,.0f}/s "
            f"({spread([r['publish_per_s'] for r in runs])}), broker "
            f"{s['publish_broker_us']:.2f} µs/record "
            f"({spread([r['publish_broker_us'] for r in runs])})"
        )
        print(
            f"  {'':8} read    {s['read_per_s']:>9,.0f}/s "
            f"({spread([r['read_per_s'] for r in runs])}), broker "
            f"{s['read_broker_us']:.2f} µs/delivered record "
            f"({spread([r['read_broker_us'] for r in runs])})"
        )
        print(
            f"  {'':8} chunks  {s['chunks_per_s']:>9,.0f}/s "
            f"({spread([r['chunks_per_s'] for r in runs])}), broker "
            f"{s['chunks_broker_us']:.2f} µs/delivered record "
            f"({spread([r['chunks_broker_us'] for r in runs])})"
        )
    if "rabbitmq" in summary:
        rb = results["rabbitmq"]
        for name in (n for n in results if n != "rabbitmq"):
            lv = results[name]
            ratios = [a["read_per_s"] / b["read_per_s"] for a, b in zip(lv, rb, strict=True)]
            pub = [a["publish_per_s"] / b["publish_per_s"] for a, b in zip(lv, rb, strict=True)]
            whole = [a["chunks_per_s"] / b["chunks_per_s"] for a, b in zip(lv, rb, strict=True)]
            print(
                f"  {name} / rabbitmq: read {statistics.median(ratios):.2f} ({spread(ratios)}), "
                f"chunks {statistics.median(whole):.2f} ({spread(whole)}), "
                f"publish {statistics.median(pub):.2f} ({spread(pub)})"
            )
            summary[f"{name}_chunks_ratio"] = {"median": statistics.median(whole), "runs": whole}
            summary[f"{name}_read_ratio"] = {"median": statistics.median(ratios), "runs": ratios}
            summary[f"{name}_publish_ratio"] = {"median": statistics.median(pub), "runs": pub}
    if args.json:
        args.json.write_text(
            json.dumps({"summary": summary, "runs": results, "load": loads}, indent=2)
        )


if __name__ == "__main__":
    main()
