"""Log lakes in the layout the Spark ingest writes (Parquet partitioned by ``date`` and
``severity``, committed batch by batch in the file sink's ``_spark_metadata`` log, with
Spark's compaction every ten batches), for tests that need a lake without running Spark."""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

COMPACT_INTERVAL = 10  # spark.sql.streaming.fileSink.log.compactInterval


@dataclass
class Row:
    ts: datetime | None
    severity: str | None
    offset: int
    message: str = "m"
    corrupt: str | None = None


@dataclass
class SyntheticLake:
    path: Path
    entries: list[list[dict[str, Any]]] = field(default_factory=list)  # per batch
    next_offset: int = 0

    def rows(self, when: datetime, severities: Sequence[str], corrupt: int = 0) -> list[Row]:
        out = []
        for sev in severities:
            out.append(Row(when, sev, self.next_offset))
            self.next_offset += 1
        for _ in range(corrupt):
            out.append(Row(None, None, self.next_offset, corrupt="not json"))
            self.next_offset += 1
        return out

    def commit(self, rows: list[Row]) -> int:
        """Write one batch's files and its log entry (or the compacted log, as Spark does
        on every tenth batch). Returns the batch id."""
        batch = len(self.entries)
        parts: dict[tuple[str, str], list[Row]] = {}
        for r in rows:
            date = r.ts.date().isoformat() if r.ts else "__HIVE_DEFAULT_PARTITION__"
            parts.setdefault((date, r.severity or "__HIVE_DEFAULT_PARTITION__"), []).append(r)
        entries = []
        for i, ((date, sev), part) in enumerate(sorted(parts.items())):
            d = self.path / f"date={date}" / f"severity={sev}"
            d.mkdir(parents=True, exist_ok=True)
            f = d / f"part-{i:05d}-{batch}.c000.snappy.parquet"
            table = pa.table(
                {
                    "offset": pa.array([r.offset for r in part], pa.int64()),
                    "ts": pa.array([r.ts for r in part], pa.timestamp("us", tz="UTC")),
                    "message": pa.array([None if r.corrupt else r.message for r in part]),
                    "_corrupt": pa.array([r.corrupt for r in part], pa.string()),
                }
            )
            # Spark writes timestamps as INT96 by default
            pq.write_table(table, f, use_deprecated_int96_timestamps=True)
            st = f.stat()
            entries.append(
                {
                    "path": f.as_uri(),
                    "size": st.st_size,
                    "isDir": False,
                    "modificationTime": int(st.st_mtime * 1000),
                    "blockReplication": 1,
                    "blockSize": 33554432,
                    "action": "add",
                }
            )
        self.entries.append(entries)
        meta = self.path / "_spark_metadata"
        meta.mkdir(parents=True, exist_ok=True)
        if (batch + 1) % COMPACT_INTERVAL == 0:
            everything = [e for es in self.entries for e in es]
            name = f"{batch}.compact"
        else:
            everything = entries
            name = str(batch)
        tmp = meta / f".{name}.tmp"
        tmp.write_text("v1\n" + "\n".join(json.dumps(e) for e in everything))
        os.replace(tmp, meta / name)
        return batch

    def clean_up_before(self, batch: int) -> None:
        """Spark deletes the batch files a compacted log replaced (after a delay)."""
        for b in range(batch):
            (self.path / "_spark_metadata" / str(b)).unlink(missing_ok=True)


def minute(epoch_minute: int) -> datetime:
    return datetime.fromtimestamp(epoch_minute * 60 + 7.25, UTC)


def holdings(lake: Path) -> dict[str, Any]:
    """What the lake holds, read from every Parquet file under it, independently of the
    dashboard's reader: totals, and records per epoch minute by severity."""
    records = corrupt = errors = 0
    files = 0
    top: int | None = None
    per_minute: dict[int, dict[str, int]] = {}
    for f in sorted(lake.rglob("*.parquet")):
        files += 1
        severity = f.parent.name.split("=", 1)[1]
        for row in pq.read_table(f, columns=["offset", "ts", "_corrupt"]).to_pylist():
            records += 1
            top = row["offset"] if top is None else max(top, row["offset"])
            if row["_corrupt"] is not None:
                corrupt += 1
                continue
            if severity in ("error", "critical"):
                errors += 1
            m = int(row["ts"].timestamp() // 60)
            counts = per_minute.setdefault(m, {})
            counts[severity] = counts.get(severity, 0) + 1
    return {
        "files": files,
        "records": records,
        "corrupt": corrupt,
        "errors": errors,
        "max_offset": top,
        "per_minute": per_minute,
    }
