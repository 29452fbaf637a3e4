"""A log lake in the layout the Spark ingest writes (every column of a log record, Parquet
partitioned by ``date`` and ``severity`` with INT96 timestamps as Spark writes them,
committed batch by batch in the file sink's ``_spark_metadata`` log, Spark's log compaction
every ten batches), for tests of the search, compaction and retention without Spark."""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

START = datetime(2026, 11, 25, 23, 0, tzinfo=UTC)
SEVERITIES = ("debug", "info", "warning", "error", "critical")
N = 260


def _doc(i: int) -> dict[str, Any]:
    return {
        "ts": START + timedelta(seconds=30 * i),
        "severity": SEVERITIES[i % 5],
        "facility": ("user", "kern")[i % 2],
        "host": f"web{i % 3}",
        "app": ("shop", "auth", "mailer")[i % 3],
        "pid": 1000 + i,
        "message": f"request {i} " + ("timed out after 30s" if i % 4 == 0 else "served"),
        "exc": "Traceback (most recent call last):\n  ...\nTimeoutError" if i % 20 == 0 else None,
        "extra": json.dumps({"request": i}),
    }


#: the day of a backfill's records (write_lake's ``backfill``): 40 days before the others
BACKFILL_DAY = (START - timedelta(days=40)).date()


def write_lake(
    lake: Path, batches: int = 4, n: int | None = None, orphan: bool = True, backfill: int = 0
) -> None:
    """``N`` records in the ingest's layout, committed in ``batches`` batches, plus a file
    the log never committed (its records must not be found). The records of the last
    ``backfill`` batches are dated :data:`BACKFILL_DAY` (old records sent late)."""
    meta = lake / "_spark_metadata"
    meta.mkdir(parents=True)
    n = N if n is None else n
    per = n // batches + 1
    for b in range(batches):
        rows = [(i, _doc(i)) for i in range(b * per, min(n, (b + 1) * per))]
        if b >= batches - backfill:
            rows = [(i, {**d, "ts": datetime.combine(BACKFILL_DAY, d["ts"].timetz())})
                    for i, d in rows]  # fmt: skip
        entries = []
        files: list[Path] = []
        parts: dict[tuple[str, str], list[tuple[int, dict[str, Any]]]] = {}
        for i, d in rows:
            parts.setdefault((d["ts"].date().isoformat(), d["severity"]), []).append((i, d))
        for k, ((day, sev), part) in enumerate(sorted(parts.items())):
            d = lake / f"date={day}" / f"severity={sev}"
            d.mkdir(parents=True, exist_ok=True)
            f = d / f"part-{k:05d}-b{b}.c000.snappy.parquet"
            cols: dict[str, Any] = {
                "offset": pa.array([i for i, _ in part], pa.int64()),
                "message_id": pa.array([str(i) for i, _ in part]),
                "ts": pa.array([r["ts"] for _, r in part], pa.timestamp("us", tz="UTC")),
            }
            for k in ("facility", "host", "app", "message", "exc", "extra"):
                cols[k] = pa.array([r[k] for _, r in part], pa.string())
            cols["pid"] = pa.array([r["pid"] for _, r in part], pa.int64())
            cols["logger"] = pa.array([None] * len(part), pa.string())
            cols["_corrupt"] = pa.array([None] * len(part), pa.string())
            pq.write_table(pa.table(cols), f, use_deprecated_int96_timestamps=True)
            files.append(f)
            entries.append({"path": f.as_uri(), "size": f.stat().st_size, "isDir": False,
                            "modificationTime": 0, "blockReplication": 1, "blockSize": 1,
                            "action": "add"})  # fmt: skip
        name = f"{b}.compact" if (b + 1) % 10 == 0 else str(b)
        if name.endswith(".compact"):  # Spark's log compaction: every file so far
            earlier = [e for k in range(max(0, b - 10), b) for e in _read(meta, k)]
            entries = earlier + entries
        (meta / name).write_text("v1\n" + "\n".join(json.dumps(e) for e in entries))
        if b == 1 and orphan:  # a killed task's complete file, never committed
            first = files[0]
            (first.parent / "part-00007-orphan.c000.snappy.parquet").write_bytes(first.read_bytes())


def _read(meta: Path, b: int) -> list[dict[str, Any]]:
    for name in (str(b), f"{b}.compact"):
        p = meta / name
        if p.exists():
            return [json.loads(x) for x in p.read_text().split("\n")[1:] if x.strip()]
    return []


def sink_compaction(lake: Path, batch: int) -> None:
    """What Spark's sink does at a log compaction batch: every entry of the previous
    compacted log and the batches since, those a delete entry names taken out."""
    begin_sink_compaction(lake, batch)()


def begin_sink_compaction(lake: Path, batch: int) -> Callable[[], None]:
    """The sink's log compaction of ``batch`` as Spark 4 writes it: its temporary file
    (Hadoop's ``.<name>.<uuid>.tmp``) is created, then the previous log files are read
    (now); the function returned writes what was read and renames the temporary file."""
    meta = lake / "_spark_metadata"
    tmp = meta / f".{batch}.compact.{uuid.uuid4()}.tmp"
    tmp.write_text("v1\n")
    entries = [e for b in range(max(0, batch - 10), batch) for e in _read(meta, b)]
    gone = {e["path"] for e in entries if e["action"] == "delete"}
    kept = [e for e in entries if e["path"] not in gone]

    def finish() -> None:
        tmp.write_text("v1\n" + "\n".join(json.dumps(e) for e in kept))
        os.replace(tmp, meta / f"{batch}.compact")

    return finish
