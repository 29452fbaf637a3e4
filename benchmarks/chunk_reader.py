"""The chunk readers alone, over recorded chunks, in µs of CPU per record: this tree's
against another's (``--baseline-src``, e.g. an older commit's ``src/`` from ``git
archive``) in the same run, rounds alternating between the two, medians and spread.

    python benchmarks/chunk_reader.py [--records N] [--repeat K] [--baseline-src DIR]

Recorded once, from this tree: ``--records`` log records (the pipeline benchmark's, ~180
bytes) published over AMQP 0-9-1 to a stream of a ``leveret server``, then read over the
stream protocol as whole Deliver frames (one osiris chunk each). Measured in a process of
each tree, from memory, no broker:

- **walk**: the Spark reader's ``Columns.add_chunk`` over every frame (CRC, entries,
  sections), batches cut at ``BATCH_ROWS`` as the reader cuts them;
- **records**: those batches to typed log records (``Columns.records``);
- **append**: the store's append of the chunks' AMQP 1.0 messages, 1,000 a sync (one
  chunk each, as a publish frame's worth), fsync included;
- **read**: the store's read of them all, 256 a call (an AMQP 0-9-1 stream consumer's
  read batch).

Each measure is the best of ``--passes`` passes within its process (the least disturbed
by other work on the machine); the rounds' medians are reported."""

from __future__ import annotations

import argparse
import json
import os
import pickle
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

KEYS = ("walk", "records", "append", "read")


def record(n: int, path: Path) -> None:
    """``n`` log records through a broker of this tree, kept as Deliver frames."""
    import pipeline
    import pipeline_stages as stages
    from tests.support.brokers import start_leveret

    broker = start_leveret(extra=["--log-level", "warning"])
    try:
        url = f"amqp://guest:guest@{broker.host}:{broker.port}/%2F"
        pipeline._declare(url, "chunks")
        pipeline.fill(url, "chunks", n)
        frames, _ = stages.chunk_read("127.0.0.1", broker.stream_port, "chunks", n)
    finally:
        broker.stop()
    path.write_bytes(pickle.dumps(frames))


def _best(fn: Any, records: int, passes: int) -> float:
    best = float("inf")
    for _ in range(passes):
        c = time.process_time()
        fn()
        best = min(best, time.process_time() - c)
    return 1e6 * best / records


def measure(path: Path, passes: int) -> dict[str, float]:
    """The four measures in this process (whichever tree its ``leveret`` is)."""
    import pipeline_stages as stages

    from leveret.protocol.stream import chunk
    from leveret.store.osiris import OsirisLog

    frames: list[bytes] = pickle.loads(path.read_bytes())
    messages = [m for f in frames for m in chunk.records(f[5:])]
    n = len(messages)
    out = {"walk": float("inf"), "records": float("inf")}
    for _ in range(passes):  # the Spark reader's stages as the pipeline's profile runs them
        got, _ = stages.chunk_stages(frames, n)
        for k in ("walk", "records"):
            out[k] = min(out[k], got[k]["cpu_us"])
    with tempfile.TemporaryDirectory(prefix="chunk-reader-") as tmp:
        logs: list[OsirisLog] = []

        def append() -> None:
            log = OsirisLog(Path(tmp) / str(len(logs)))
            logs.append(log)
            for i in range(0, n, 1000):
                for m in messages[i : i + 1000]:
                    log.append(m)
                log.sync()

        def read() -> None:
            offset, seen = 0, 0
            while seen < n:
                records = logs[-1].read(offset, 256)
                seen += len(records)
                offset = records[-1][0] + 1

        out["append"] = _best(append, n, passes)
        out["read"] = _best(read, n, passes)
        for log in logs:
            log.close()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=200_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--passes", type=int, default=3)
    ap.add_argument("--baseline-src", type=Path)
    ap.add_argument("--measure", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.measure is not None:
        print(json.dumps(measure(args.measure, args.passes)))
        return
    trees = {"this": ROOT / "src"}
    if args.baseline_src is not None:
        trees["baseline"] = args.baseline_src.resolve()
    with tempfile.TemporaryDirectory(prefix="chunk-reader-") as tmp:
        frames = Path(tmp) / "frames.pickle"
        record(args.records, frames)
        runs: dict[str, list[dict[str, float]]] = {name: [] for name in trees}
        loads = [os.getloadavg()[0]]
        for r in range(args.repeat):
            order = list(trees) if r % 2 == 0 else list(reversed(trees))
            for name in order:
                env = {**os.environ, "PYTHONPATH": f"{trees[name]}:{ROOT}"}
                cmd = [sys.executable, __file__, "--measure", str(frames),
                       "--passes", str(args.passes)]  # fmt: skip
                got = subprocess.run(cmd, env=env, check=True, capture_output=True, text=True)
                runs[name].append(json.loads(got.stdout))
                print(name, got.stdout.strip(), flush=True)
            loads.append(os.getloadavg()[0])
    print(
        f"{args.records:,} records, CPU µs per record, median (min-max) of {args.repeat} "
        f"rounds, best of {args.passes} passes each, load average "
        f"{min(loads):.1f}-{max(loads):.1f}:"
    )
    for name, rs in runs.items():
        cells = [
            f"{k} {statistics.median(r[k] for r in rs):.3f} "
            f"({min(r[k] for r in rs):.3f}-{max(r[k] for r in rs):.3f})"
            for k in KEYS
        ]
        print(f"  {name:9}", ", ".join(cells))
    if "baseline" in runs:
        ratios = {
            k: [a[k] / b[k] for a, b in zip(runs["this"], runs["baseline"], strict=True)]
            for k in KEYS
        }
        print("  this / baseline:", ", ".join(
            f"{k} {statistics.median(v):.3f} ({min(v):.3f}-{max(v):.3f})"
            for k, v in ratios.items()))  # fmt: skip


if __name__ == "__main__":
    main()
