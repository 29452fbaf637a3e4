"""The lake's janitor on a lake laid out as Spark's file sink lays it out: the files its log
names stay, the ones it never named go once no task can commit them any more."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from leveret.logs.lake import Janitor, SinkLog


def _file(lake: Path, part: str, name: str, mtime_ns: int | None = None) -> Path:
    d = lake / part
    d.mkdir(parents=True, exist_ok=True)
    p = d / name
    p.write_bytes(b"PAR1")
    (d / f".{name}.crc").write_bytes(b"crc")
    if mtime_ns is not None:
        os.utime(p, ns=(mtime_ns, mtime_ns))
    return p


def _commit(lake: Path, batch: int, files: list[Path], compact: bool = False,
            mtime_ns: int | None = None) -> None:  # fmt: skip
    meta = lake / "_spark_metadata"
    meta.mkdir(parents=True, exist_ok=True)
    lines = ["v1"] + [
        json.dumps(
            {
                "path": p.as_uri(),
                "size": 4,
                "isDir": False,
                "modificationTime": 1,
                "blockReplication": 1,
                "blockSize": 1,
                "action": "add",
            }
        )
        for p in files
    ]
    target = meta / (f"{batch}.compact" if compact else str(batch))
    target.write_text("\n".join(lines))
    if mtime_ns is not None:
        os.utime(target, ns=(mtime_ns, mtime_ns))


def test_a_lake_without_a_log_is_left_alone(tmp_path: Path) -> None:
    f = _file(tmp_path, "date=2026-11-26/severity=info", "part-00000-a.parquet")
    assert Janitor(tmp_path).sweep(everything=True) == []
    assert f.exists()


def test_at_start_every_uncommitted_file_goes(tmp_path: Path) -> None:
    kept = _file(tmp_path, "date=2026-11-26/severity=info", "part-00000-a.c000.snappy.parquet")
    orphan = _file(tmp_path, "date=2026-11-26/severity=info", "part-00001-b.c000.snappy.parquet")
    other = _file(tmp_path, "date=2026-11-25/severity=error", "part-00000-c.c000.snappy.parquet")
    mine = _file(tmp_path, "date=2026-11-26/severity=info", "notes.txt")
    _commit(tmp_path, 0, [kept, other])
    removed = Janitor(tmp_path).sweep(everything=True)
    assert removed == [str(orphan)]
    assert not orphan.exists() and not (orphan.parent / f".{orphan.name}.crc").exists()
    assert kept.exists() and other.exists() and mine.exists()


def test_after_a_batch_only_what_is_older_than_its_commit_goes(tmp_path: Path) -> None:
    now = time.time_ns()
    part = "date=2026-11-26/severity=info"
    committed = _file(tmp_path, part, "part-00000-a.parquet", now - 3_000_000_000)
    dead = _file(tmp_path, part, "part-00001-b.parquet", now - 2_000_000_000)  # a killed task
    _commit(tmp_path, 0, [committed], mtime_ns=now - 1_000_000_000)
    writing = _file(tmp_path, part, "part-00000-c.parquet", now)  # the next batch's
    janitor = Janitor(tmp_path)
    assert janitor.sweep() == [str(dead)]
    assert writing.exists() and committed.exists()
    # the next batch commits it: it stays; what its dead attempt wrote goes next time
    late = _file(tmp_path, part, "part-00001-d.parquet", now + 1_000_000_000)
    _commit(tmp_path, 1, [writing], mtime_ns=now + 2_000_000_000)
    assert janitor.sweep() == [str(late)]
    assert writing.exists() and committed.exists()
    assert janitor.sweep() == []


def test_a_compacted_log_and_a_lake_named_through_a_symlink(tmp_path: Path) -> None:
    real = tmp_path / "real"
    part = "date=2026-11-26/severity=warning"
    a = _file(real, part, "part-00000-a.parquet")
    b = _file(real, part, "part-00000-b.parquet")
    orphan = _file(real, part, "part-00000-c.parquet")
    _commit(real, 0, [a])
    _commit(real, 9, [a, b], compact=True)
    (tmp_path / "link").symlink_to(real)
    log = SinkLog(tmp_path / "link")
    assert log.refresh() == 9
    assert sorted(log.names) == ["part-00000-a.parquet", "part-00000-b.parquet"]
    assert Janitor(tmp_path / "link").sweep(everything=True) == [
        str(tmp_path / "link" / part / orphan.name)
    ]
    assert a.exists() and b.exists() and not orphan.exists()
