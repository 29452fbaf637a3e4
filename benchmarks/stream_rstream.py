"""RabbitMQ's stream protocol through the unmodified rstream client, Leveret against
RabbitMQ 3.10.8 in the same run: publish rate with confirms, then the rate a subscription
from the first offset reads the stream at, and each broker's CPU per record (``/proc``).

    python benchmarks/stream_rstream.py [--records N] [--repeat K] [--json out.json]

Leveret is started on free ports with a temporary data dir; RabbitMQ is the node on
127.0.0.1 (its stream plugin on 5552, enabled if need be; skipped with a note when it is
not there). Bodies are 200-byte JSON-like log lines, published 1,000 per batch."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
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
from tests.support.brokers import RABBITMQ_STREAM_PORT, ensure_rabbitmq_stream, start_leveret  # noqa: E402

KW: dict[str, Any] = {"username": "guest", "password": "guest", "load_balancer_mode": True}
BODY = b'{"ts":"2026-11-26T07:00:00Z","level":"info","msg":"' + b"x" * 150 + b'"}'


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
    async with Producer("127.0.0.1", port, **KW) as p:
        await p.delete_stream(stream)
    return {
        "publish_per_s": records / publish_s,
        "publish_broker_us": publish_cpu / records * 1e6,
        "read_per_s": records / read_s,
        "read_broker_us": read_cpu / records * 1e6,
    }


def rabbitmq_pid() -> int | None:
    out = subprocess.run(["ss", "-ltnpH"], capture_output=True, text=True).stdout
    for line in out.splitlines():
        if f":{RABBITMQ_STREAM_PORT} " in line and "pid=" in line:
            return int(line.split("pid=")[1].split(",")[0])
    return None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=100_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    targets: dict[str, tuple[int, int]] = {}
    leveret = start_leveret(extra=["--log-level", "warning"])
    assert leveret.process is not None
    targets["leveret"] = (leveret.stream_port, leveret.process.pid)
    pid = rabbitmq_pid() if ensure_rabbitmq_stream() else None
    if pid is not None:
        targets["rabbitmq"] = (RABBITMQ_STREAM_PORT, pid)
    else:
        print("RabbitMQ's stream protocol is not reachable on 5552: Leveret alone")
    results: dict[str, list[dict[str, float]]] = {name: [] for name in targets}
    try:
        for _ in range(args.repeat):
            for name, (port, bpid) in targets.items():  # interleaved: same load on both
                results[name].append(asyncio.run(one_run(port, bpid, args.records)))
    finally:
        leveret.stop()
    summary = {
        name: {k: statistics.median(r[k] for r in runs) for k in runs[0]}
        for name, runs in results.items()
    }
    print(f"{args.records:,} records of {len(BODY)} bytes, median of {args.repeat}:")
    for name, s in summary.items():
        print(
            f"  {name:8} publish {s['publish_per_s']:>9,.0f}/s (broker {s['publish_broker_us']:.2f}"
            f" µs/record)   read {s['read_per_s']:>9,.0f}/s (broker {s['read_broker_us']:.2f}"
            " µs/record)"
        )
    if "rabbitmq" in summary:
        lv, rb = summary["leveret"], summary["rabbitmq"]
        print(
            f"  ratio    publish {lv['publish_per_s'] / rb['publish_per_s']:.2f}   "
            f"read {lv['read_per_s'] / rb['read_per_s']:.2f}"
        )
    if args.json:
        args.json.write_text(json.dumps({"summary": summary, "runs": results}, indent=2))


if __name__ == "__main__":
    main()
